"""Facts that say the same thing under different keys (issue 13 item 11).

A new key of an owner and scope is reconciled with the current fact of another key that is
near it (similar key, or the same value): by the workspace's chat model when one is
configured, else by the rule of facts.services.consolidation. Same-key remembering is
unchanged.
"""

import json
from datetime import timedelta

from django.utils import timezone

from core.models import AuditEvent
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import use_test_chat
from facts.models import Fact
from facts.services.consolidation import key_similarity
from identities.tests.factories import MemoryUserFactory

REMEMBER = "/api/v1/facts/remember/"
LIST = "/api/v1/facts/"


class CrossKeyTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.other_person = MemoryUserFactory(workspace=cls.workspace)

    def remember(self, key, value, person=None, expect=(200, 201), **extra):
        body = {"key": key, "value": value, "scope": "user", "memory_user": str((person or self.person).pk)}
        response = self.api().post(REMEMBER, {**body, **extra}, format="json")
        assert response.status_code in expect, response.json()
        return response.json()

    def decisions(self, fact_id):
        return [
            e.changes
            for e in AuditEvent.objects.filter(entity_type="fact", entity_id=str(fact_id))
            if "decision" in e.changes
        ]

    def test_a_new_value_under_a_similar_key_supersedes_across_keys(self):
        old = self.remember("city", "Lisbon")["fact"]
        body = self.remember("home_city", "Porto")
        assert body["outcome"] == "superseded" and body["previous"] == old["id"]
        record = body["consolidation"]
        assert record["decision"] == "supersede" and record["by"] == "rule"
        assert record["old"] == old["id"] and record["new"] == body["fact"]["id"]
        closed = Fact.objects.get(pk=old["id"])
        assert closed.valid_to is not None and str(closed.superseded_by_id) == body["fact"]["id"]
        assert closed.times_contradicted == 1
        current = self.api().get(LIST, {"memory_user": str(self.person.pk)}).json()["results"]
        assert [f["key"] for f in current] == ["home_city"]
        (audited,) = self.decisions(old["id"])
        assert audited["decision"] == "supersede" and audited["new"] == body["fact"]["id"]

    def test_the_same_value_under_a_similar_key_confirms_the_stored_fact(self):
        old = self.remember("favorite_colors", "green")["fact"]
        body = self.remember("favorite_color", "Green")
        assert body["outcome"] == "confirmed" and body["fact"]["id"] == old["id"]
        assert body["fact"]["times_confirmed"] == 1
        assert body["consolidation"]["decision"] == "noop" and body["consolidation"]["new"] is None
        assert Fact.objects.filter(memory_user=self.person).count() == 1
        assert self.decisions(old["id"])[0]["decision"] == "noop"

    def test_a_confirmation_across_keys_counts_as_a_change_for_retention(self):
        """Retention's age column for facts is updated_at, which a same-key confirmation moves:
        a fact confirmed across keys (or closed by another) aged as if nothing had happened."""
        old = self.remember("favorite_colors", "green")["fact"]
        Fact.objects.filter(pk=old["id"]).update(updated_at=timezone.now() - timedelta(days=40))
        self.remember("favorite_color", "Green")
        assert Fact.objects.get(pk=old["id"]).updated_at > timezone.now() - timedelta(minutes=1)

        city = self.remember("city", "Lisbon")["fact"]
        Fact.objects.filter(pk=city["id"]).update(updated_at=timezone.now() - timedelta(days=40))
        self.remember("home_city", "Porto")
        assert Fact.objects.get(pk=city["id"]).updated_at > timezone.now() - timedelta(minutes=1)

    def test_the_same_value_under_an_unrelated_key_is_kept_as_two_facts(self):
        sister = self.remember("sister", "Ana")["fact"]
        body = self.remember("mother", "Ana")
        assert body["outcome"] == "created" and body["consolidation"]["decision"] == "add"
        assert Fact.objects.get(pk=sister["id"]).valid_to is None
        creation = AuditEvent.objects.get(entity_type="fact", entity_id=body["fact"]["id"], action="create")
        assert creation.changes["consolidation"]["old"] == sister["id"]

    def test_an_unrelated_key_is_no_candidate_and_the_same_key_behaves_as_before(self):
        self.remember("city", "Lisbon")
        body = self.remember("employer", "Acme")
        assert body["outcome"] == "created" and body["consolidation"] is None
        body = self.remember("city", "Porto")
        assert body["outcome"] == "superseded" and body["consolidation"] is None

    def test_keys_that_only_share_words_are_two_facts(self):
        """Regression: `get-local-time` superseded `local_time_zone` (Jaccard 0.5)."""
        zone = self.remember("local_time_zone", "WET")["fact"]
        body = self.remember("get-local-time", "date +%H:%M")
        assert body["outcome"] == "created" and body["consolidation"]["decision"] == "add"
        assert Fact.objects.get(pk=zone["id"]).valid_to is None
        first = self.remember("note_number_1", "same text")["fact"]
        body = self.remember("note_number_2", "same text")
        assert body["outcome"] == "created" and body["fact"]["id"] != first["id"]

    def test_overwrite_false_keeps_both(self):
        old = self.remember("city", "Lisbon")["fact"]
        body = self.remember("home_city", "Porto", overwrite=False)
        assert body["outcome"] == "created" and body["consolidation"]["decision"] == "add"
        assert Fact.objects.get(pk=old["id"]).valid_to is None

    def test_another_persons_or_scopes_fact_never_consolidates(self):
        theirs = self.remember("city", "Lisbon", person=self.other_person)["fact"]
        agent_fact = (
            self.api()
            .post(
                REMEMBER,
                {"key": "city", "value": "Lisbon", "scope": "agent", "agent": "assistant"},
                format="json",
            )
            .json()["fact"]
        )
        body = self.remember("home_city", "Porto")
        assert body["outcome"] == "created" and body["consolidation"] is None
        assert Fact.objects.get(pk=theirs["id"]).valid_to is None
        assert Fact.objects.get(pk=agent_fact["id"]).valid_to is None

    def test_key_similarity(self):
        assert key_similarity("city", "home_city") == 1.0
        assert key_similarity("Favorite-Colors", "favorite color") == 1.0
        assert key_similarity("employer", "city") == 0.0


class CrossKeyLLMTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_chat(self.server, self.workspace)

    def remember(self, key, value, **extra):
        body = {"key": key, "value": value, "scope": "user", "memory_user": str(self.person.pk), **extra}
        response = self.api().post(REMEMBER, body, format="json")
        assert response.status_code in (200, 201), response.json()
        return response.json()

    def test_the_model_decides_across_keys(self):
        employer = self.remember("employer", "Acme")["fact"]
        self.server.chat_replies.append(json.dumps({"decision": "noop", "reason": "Same employer."}))
        body = self.remember("works_at", "Acme")  # same value, unrelated key: asked
        assert body["outcome"] == "confirmed" and body["fact"]["id"] == employer["id"]
        assert body["consolidation"]["by"] == "llm" and body["consolidation"]["reason"] == "Same employer."
        (path, request) = self.server.requests[-1]
        assert "employer: Acme" in request["messages"][1]["content"]
        assert "works_at: Acme" in request["messages"][1]["content"]

        self.server.chat_replies.append(json.dumps({"decision": "update", "reason": "More precise."}))
        body = self.remember("employer_name", "Acme Corp")
        assert body["outcome"] == "superseded" and body["consolidation"]["decision"] == "update"
        assert Fact.objects.get(pk=employer["id"]).valid_to is not None
        assert Fact.objects.get(pk=employer["id"]).times_contradicted == 0

    def test_a_malformed_answer_falls_back_to_the_rule(self):
        self.remember("city", "Lisbon")
        self.server.chat_replies.append('{"decision": "rewrite", "reason": "?"}')
        body = self.remember("home_city", "Porto")
        assert body["consolidation"]["by"] == "rule" and body["consolidation"]["decision"] == "supersede"
        assert "unusable" in body["consolidation"]["reason"]
