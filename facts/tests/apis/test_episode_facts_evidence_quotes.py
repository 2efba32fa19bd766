"""Facts learned from an episode need a quote that proves something: "I" or "ok" is in every record,
so a fact the model made up passed with it (core.lib.evidence holds the rule)."""

import json

from core.lib.evidence import EVIDENCE_TOO_WEAK
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodes.models import Episode
from episodic.tests.factories import use_test_chat
from facts.models import Fact
from facts.services.episode_extraction import REJECT_EVIDENCE_NOT_FOUND
from identities.tests.factories import MemoryUserFactory


class EpisodeFactsWeakEvidenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.episode = Episode.objects.create(
            workspace=cls.workspace,
            agent=cls.agent,
            memory_user=cls.person,
            trigger_type="chat",
            messages=[
                {"role": "user", "content": "Hi!\ntz: UTC\nI live in Porto these days, ok?"},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "ok"},
            ],
        )

    def extract(self, **body):
        response = self.api().post(f"/api/v1/episodes/{self.episode.pk}/extract-facts/", body, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def test_a_models_fact_quoting_a_word_that_proves_nothing_is_not_remembered(self):
        with OpenAITestServer() as server:
            use_test_chat(server, self.workspace)
            server.chat_replies.append(
                json.dumps(
                    {
                        "facts": [
                            {"key": "allergy", "value": "penicillin", "evidence": "I"},
                            {"key": "consents_to_marketing", "value": True, "evidence": "ok"},
                            {"key": "employer", "value": "Acme", "evidence": "these days"},
                            {"key": "city", "value": "Porto", "evidence": "I live in Porto"},
                            {"key": "timezone", "value": "UTC", "evidence": "tz: UTC"},
                        ]
                    }
                )
            )
            body = self.extract()
        assert body["method"] == "llm" and body["llm_error"] == ""
        assert [s["key"] for s in body["stored"]] == ["city", "timezone"]
        assert [(r["key"], r["reason"]) for r in body["rejected"]] == [
            ("allergy", EVIDENCE_TOO_WEAK),
            ("consents_to_marketing", EVIDENCE_TOO_WEAK),
            ("employer", EVIDENCE_TOO_WEAK),
        ]
        assert set(Fact.objects.values_list("key", flat=True)) == {"city", "timezone"}

    def test_a_given_weak_quote_is_rejected_like_a_quote_not_found(self):
        body = self.extract(
            candidates=[
                {"key": "allergy", "value": "penicillin", "evidence": "Hi!"},
                {"key": "pet", "value": "cat", "evidence": "I have a cat"},
            ]
        )
        assert body["stored"] == []
        assert [(r["key"], r["reason"]) for r in body["rejected"]] == [
            ("allergy", EVIDENCE_TOO_WEAK),
            ("pet", REJECT_EVIDENCE_NOT_FOUND),
        ]
        assert not Fact.objects.exists()

    def test_the_patterns_still_propose_short_key_value_lines(self):
        """A `key: value` line quotes itself, two words that name the fact."""
        body = self.extract(use_llm=False)
        assert body["method"] == "patterns"
        assert [(s["key"], s["value"], s["fact"]["evidence"]) for s in body["stored"]] == [
            ("tz", "UTC", "tz: UTC")
        ]
        assert body["rejected"] == []
