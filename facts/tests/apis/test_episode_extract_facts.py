"""POST /api/v1/episodes/{id}/extract-facts/: facts learned from an episode, each quoting it."""

import json

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodes.models import Episode
from episodic.tests.factories import use_test_chat
from facts.models import Fact
from facts.services.episode_extraction import (
    REJECT_CURRENT_DIFFERS,
    REJECT_EVIDENCE_NOT_FOUND,
    REJECT_EVIDENCE_NOT_USER,
)
from identities.tests.factories import MemoryUserFactory


class EpisodeExtractFactsTests(MemoryTestCase):
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
                {
                    "role": "user",
                    "content": "Hi!\ntimezone: Europe/Lisbon\nAlso, my favourite colour is green.",
                },
                {"role": "assistant", "content": "Noted. Your account tier is gold."},
                {"role": "user", "content": [{"type": "text", "text": "I live in   Porto these days"}]},
            ],
            final_output={"text": "Booked the 9:00 slot"},
        )
        cls.agent_episode = Episode.objects.create(
            workspace=cls.workspace, agent=cls.agent, final_output="The staging server is db-7."
        )
        cls.other_episode = Episode.objects.create(workspace=cls.workspace, agent=cls.other_agent)

    def url(self, episode=None):
        return f"/api/v1/episodes/{(episode or self.episode).pk}/extract-facts/"

    def extract(self, key=None, episode=None, **body):
        return self.api(key).post(self.url(episode), body, format="json")

    def test_given_candidates_are_checked_against_the_episode(self):
        """A quote of a user message is stored with source_episode; a quote that is not in the
        record, or (for a fact about the person) only in the assistant's words, is refused."""
        response = self.extract(
            candidates=[
                {"key": "city", "value": "Porto", "evidence": "I live in Porto these days"},
                {"key": "pet", "value": "cat", "evidence": "I have a cat"},
                {"key": "tier", "value": "gold", "evidence": "Your account tier is gold."},
            ]
        )
        assert response.status_code == 200, response.json()
        body = response.json()
        assert body["method"] == "given"
        (stored,) = body["stored"]
        assert stored["outcome"] == "created" and stored["found_in"] == "messages[2]"
        assert stored["fact"]["source_episode"] == str(self.episode.pk)
        assert stored["fact"]["evidence"] == "I live in Porto these days"
        assert stored["fact"]["scope"] == "user" and stored["fact"]["memory_user"] == str(self.person.pk)
        assert [(r["key"], r["reason"]) for r in body["rejected"]] == [
            ("pet", REJECT_EVIDENCE_NOT_FOUND),
            ("tier", REJECT_EVIDENCE_NOT_USER),
        ]
        fact = Fact.objects.get(key="city")
        assert fact.source_episode_id == self.episode.pk and fact.source == Fact.Source.EXTRACTION
        assert not Fact.objects.filter(key__in=["pet", "tier"]).exists()
        # Again: confirmed, not duplicated; a different value does not overwrite.
        again = self.extract(candidates=[{"key": "city", "value": "Porto", "evidence": "I live in Porto"}])
        assert again.json()["stored"][0]["outcome"] == "confirmed"
        other = self.extract(candidates=[{"key": "city", "value": "Braga", "evidence": "I live in Porto"}])
        assert other.json()["rejected"][0]["reason"] == REJECT_CURRENT_DIFFERS
        assert Fact.objects.filter(key="city", valid_to__isnull=True).get().value == "Porto"

    def test_without_a_chat_model_the_patterns_propose(self):
        """`key: value` lines and "my X is Y" clauses of the user's messages."""
        body = self.extract().json()
        assert body["method"] == "patterns"
        assert {(s["key"], s["value"]) for s in body["stored"]} == {
            ("timezone", "Europe/Lisbon"),
            ("favourite_colour", "green"),
        }
        assert body["rejected"] == []

    def test_an_episode_without_a_person_gives_agent_facts_quoted_from_its_output(self):
        body = self.extract(
            episode=self.agent_episode,
            candidates=[{"key": "staging_db", "value": "db-7", "evidence": "The staging server is db-7."}],
        ).json()
        (stored,) = body["stored"]
        assert stored["found_in"] == "final_output"
        assert stored["fact"]["scope"] == "agent" and stored["fact"]["agent"] == "assistant"

    def test_the_chat_model_proposes_through_the_real_client(self):
        """Its proposals are checked like any others: a quote it made up is refused."""
        with OpenAITestServer() as server:
            use_test_chat(server, self.workspace)
            server.chat_replies.append(
                json.dumps(
                    {
                        "facts": [
                            {
                                "key": "timezone",
                                "value": "Europe/Lisbon",
                                "evidence": "timezone: Europe/Lisbon",
                            },
                            {"key": "age", "value": 41, "evidence": "I am 41 years old"},
                            "not an object",
                        ]
                    }
                )
            )
            body = self.extract().json()
            (path, request) = server.requests[-1]
        assert path.endswith("/chat/completions")
        assert "my favourite colour is green" in request["messages"][1]["content"]
        assert body["method"] == "llm" and body["llm_error"] == ""
        assert [s["key"] for s in body["stored"]] == ["timezone"]
        assert [(r["key"], r["reason"]) for r in body["rejected"]] == [("age", REJECT_EVIDENCE_NOT_FOUND)]

    def test_a_failing_chat_model_falls_back_to_the_patterns(self):
        with OpenAITestServer() as server:
            use_test_chat(server, self.workspace)
            server.fail_next = 1
            body = self.extract().json()
        assert body["method"] == "patterns" and "Chat endpoint failed" in body["llm_error"]
        assert len(body["stored"]) == 2

    def test_isolation(self):
        """Another workspace and another agent's key get the 404 of an unknown id; a read-only key a 403."""
        candidates = [{"key": "city", "value": "Porto", "evidence": "I live in Porto"}]
        assert self.extract(self.outsider_key, candidates=candidates).status_code == 404
        assert (
            self.extract(self.agent_key, episode=self.other_episode, candidates=candidates).status_code == 404
        )
        assert self.extract(self.read_only_key, candidates=candidates).status_code == 403
        assert (
            self.api()
            .post("/api/v1/episodes/00000000-0000-4000-8000-000000000000/extract-facts/")
            .status_code
            == 404
        )
        assert not Fact.objects.exists()
        assert self.extract(self.agent_key, candidates=candidates).status_code == 200

    def test_hostile_input_is_a_400(self):
        good = {"key": "city", "value": "Porto", "evidence": "I live in Porto"}
        for body in (
            {"candidates": "city=Porto"},
            {"candidates": [good] * 51},
            {"candidates": [{**good, "key": "k" * 256}]},
            {"candidates": [{**good, "evidence": ""}]},
            {"candidates": [{"key": "city", "value": "Porto"}]},
            {"candidates": [{**good, "extra": 1}]},
            {"candidates": [["city", "Porto"]]},
            {"use_llm": "sometimes"},
            {"surprise": True},
        ):
            response = self.extract(**body)
            assert response.status_code == 400, (body, response.status_code, response.content[:200])
            assert set(response.json()["error"]) >= {"code", "message", "fields"}
        assert not Fact.objects.exists()
        # A quote hidden in invisible characters is no evidence.
        response = self.extract(candidates=[{**good, "evidence": "\u200b\u2060"}])
        assert response.json()["rejected"][0]["reason"] == "evidence_missing"
