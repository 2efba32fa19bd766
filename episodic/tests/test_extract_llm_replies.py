"""Extraction with a misbehaving chat endpoint (core.testing_openai)."""

import json

from django.test import override_settings
from django.urls import reverse

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import REJECT_EMPTY
from episodic.tests.factories import memory_user_factory, use_test_chat, use_test_embeddings
from facts.models import Fact

EXTRACT = reverse("api:episodic_entries:extract")
SAID = "I moved to Lisbon last May."
TRANSCRIPT = [
    {"role": "user", "content": f"{SAID} The printer shows error E-42 on every job."},
    {"role": "assistant", "content": "Thanks, noted."},
]
CLIENT_CANDIDATE = {"content": "Ada moved to Lisbon in May.", "source": "user_assertion", "evidence": SAID}


class ExtractionWithABadModelTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        use_test_chat(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def extract(self, reply: str, **body):
        self.server.chat_handler = lambda request: reply
        return self.api().post(
            EXTRACT,
            {
                "agent": "assistant",
                "memory_user": str(self.person.pk),
                "transcript": TRANSCRIPT,
                "sync": True,
                **body,
            },
            format="json",
        )

    def test_a_note_that_is_not_text_is_rejected_not_stored_as_its_python_form(self):
        """`"content": 5` or an object was stored as "5" or "{'a': 1}"."""
        for content in (5, {"a": 1}, ["Ada moved to Lisbon."], True):
            reply = json.dumps(
                {"entries": [{"content": content, "source": "user_assertion", "evidence": SAID}]}
            )
            response = self.extract(reply)
            assert response.status_code == 200, response.json()
            body = response.json()
            assert body["stored"] == [], content
            assert [r["reason"] for r in body["rejected"]] == [REJECT_EMPTY]
        assert not EpisodicEntry.objects.filter(memory_user=self.person).exists()

    def test_a_source_or_evidence_that_is_not_text_is_rejected(self):
        reply = json.dumps(
            {
                "entries": [
                    {"content": "Ada moved to Lisbon.", "source": ["user_assertion"], "evidence": SAID},
                    {
                        "content": "Ada moved to Lisbon in May.",
                        "source": "user_assertion",
                        "evidence": [SAID],
                    },
                ]
            }
        )
        body = self.extract(reply).json()
        assert body["stored"] == []
        assert [r["reason"] for r in body["rejected"]] == ["unknown_source", "evidence_missing"]

    def test_a_fact_key_that_is_not_text_is_not_remembered(self):
        """`"key": {"a": 1}` was remembered as the fact "{'a': 1}"."""
        reply = json.dumps(
            {
                "entries": [],
                "facts": [
                    {"key": {"a": 1}, "value": "Lisbon", "evidence": SAID},
                    {"key": 7, "value": "Lisbon", "evidence": SAID},
                ],
            }
        )
        body = self.extract(reply).json()
        assert [f["outcome"] for f in body["facts"]] == ["rejected", "rejected"]
        assert not Fact.objects.filter(memory_user=self.person).exists()

    def test_a_reply_nested_too_deep_to_parse_is_an_llm_error_not_a_500(self):
        """The client's candidates still run, as with any failing endpoint."""
        reply = '{"entries": ' + "[" * 5000 + "]" * 5000 + "}"
        response = self.extract(reply, candidates=[CLIENT_CANDIDATE])
        assert response.status_code == 200, response.content[:300]
        body = response.json()
        assert body["llm_used"] is False and body["llm_error"]
        assert [e["content"] for e in body["stored"]] == [CLIENT_CANDIDATE["content"]]

    @override_settings(LLM_TIMEOUT_SECONDS=0.2)
    def test_a_timeout_is_reported_and_the_clients_candidates_are_stored(self):
        self.server.delay_seconds = 1.0
        response = self.extract(json.dumps({"entries": []}), candidates=[CLIENT_CANDIDATE])
        self.server.delay_seconds = 0.0
        assert response.status_code == 200
        body = response.json()
        assert body["llm_used"] is False and "Chat endpoint failed" in body["llm_error"]
        assert [e["content"] for e in body["stored"]] == [CLIENT_CANDIDATE["content"]]

    def test_a_quote_not_in_the_transcript_is_never_stored(self):
        reply = json.dumps(
            {
                "entries": [
                    {
                        "content": "Ada lives in Paris.",
                        "source": "user_assertion",
                        "evidence": "I live in Paris.",
                    },
                    {
                        "content": "Ada moved to Lisbon.",
                        "source": "user_assertion",
                        "evidence": "Thanks, noted.",
                    },
                ]
            }
        )
        body = self.extract(reply).json()
        assert body["stored"] == []
        assert [r["reason"] for r in body["rejected"]] == [
            "evidence_not_in_transcript",
            "evidence_not_from_user",
        ]
