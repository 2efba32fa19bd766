"""Consolidation of a new entry with a similar stored one (issue 13 item 11).

Below the agent's duplicate threshold and above the conflict floor, a new entry is
reconciled with the person's most similar stored entry: by the workspace's chat model when
one is configured, else by a deterministic rule. The test embeddings are bags of words, so
the similarities quoted in the tests are those of the sentences' shared words.
"""

import json

from django.urls import reverse

from core.lib.consolidation import claim_rule
from core.models import AuditEvent
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.tests.factories import (
    bag_of_words_vectors,
    entry_factory,
    memory_user_factory,
    use_test_chat,
    use_test_embeddings,
)

LIST = reverse("api:episodic_entries:list")
BATCH = reverse("api:episodic_entries:batch")
EXTRACT = reverse("api:episodic_entries:extract")
SEARCH = reverse("api:episodic_entries:search")


class ConsolidationTestCase(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def body(self, **overrides):
        return {"agent": "assistant", "memory_user": str(self.person.pk), **overrides}

    def create(self, content, **overrides):
        response = self.api().post(LIST, self.body(content=content, **overrides), format="json")
        assert response.status_code in (200, 201), response.json()
        return response.json()

    def stored(self, content, **kwargs):
        return entry_factory(agent=self.agent, memory_user=self.person, content=content, **kwargs)

    def listed(self, **params):
        response = self.api().get(LIST, {"memory_user": str(self.person.pk), **params})
        assert response.status_code == 200, response.json()
        return [row["content"] for row in response.json()["results"]]

    def decisions(self, entry):
        return [
            e.changes
            for e in AuditEvent.objects.filter(entity_type="episodic_entry", entity_id=str(entry.pk))
            if "decision" in e.changes
        ]


class RuleTests(ConsolidationTestCase):
    """No chat endpoint: the deterministic rule decides."""

    def test_a_move_supersedes_the_old_city_which_is_kept_as_history(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        body = self.create("Ada now lives in Porto.")  # similarity 0.67
        assert body["created"] is True
        record = body["consolidation"]
        assert record["decision"] == "supersede" and record["by"] == "rule"
        assert record["old"] == str(lisbon.pk) and record["new"] == body["id"]
        assert "lisbon -> porto" in record["reason"]
        assert body["consolidation"] == EpisodicEntry.objects.get(pk=body["id"]).consolidation

        lisbon.refresh_from_db()
        assert lisbon.status == "superseded" and lisbon.valid_to is not None
        assert str(lisbon.superseded_by_id) == body["id"]
        assert lisbon.valid_to >= lisbon.valid_from
        # Search, the list and <memory> read current entries; the list shows history on request.
        search = self.api().post(SEARCH, self.body(query="Lisbon", mode="lexical"), format="json")
        assert search.json()["results"] == []
        search = self.api().post(SEARCH, self.body(query="Ada lives", mode="hybrid"), format="json")
        assert [h["entry"]["id"] for h in search.json()["results"]] == [body["id"]]
        assert self.listed() == ["Ada now lives in Porto."]
        assert sorted(self.listed(include_superseded="true")) == [
            "Ada lives in Lisbon.",
            "Ada now lives in Porto.",
        ]
        assert self.listed(status="superseded") == ["Ada lives in Lisbon."]
        detail = self.api().get(reverse("api:episodic_entries:detail", args=[lisbon.pk])).json()
        assert detail["superseded_by"] == body["id"] and detail["valid_to"] is not None
        # The decision is audited on the closed entry, the new entry's creation carries it.
        (audited,) = self.decisions(lisbon)
        assert audited["decision"] == "supersede" and audited["new"] == body["id"] and audited["by"] == "rule"
        creation = AuditEvent.objects.get(entity_type="episodic_entry", entity_id=body["id"], action="create")
        assert creation.changes["decision"] == "supersede" and creation.changes["old"] == str(lisbon.pk)

    def test_an_operator_restoring_a_superseded_entry_makes_it_current_again(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        self.create("Ada now lives in Porto.")
        detail = reverse("api:episodic_entries:detail", args=[lisbon.pk])
        restored = self.api().patch(detail, {"status": "active"}, format="json").json()
        assert (restored["status"], restored["valid_to"], restored["superseded_by"]) == ("active", None, None)
        closed = self.api().patch(detail, {"status": "superseded"}, format="json").json()
        assert closed["valid_to"] is not None

    def test_a_bad_include_superseded_is_a_400_naming_it(self):
        response = self.api().get(LIST, {"include_superseded": "<script>"})
        assert response.status_code == 400
        assert "include_superseded" in response.json()["error"]["fields"]

    def test_a_restatement_is_a_confirmation_not_a_second_entry(self):
        self.agent.memory_settings = {"dedupe_threshold": 0.95}
        self.agent.save(update_fields=["memory_settings"])
        lisbon = self.stored("Ada lives in Lisbon.")
        body = self.create("Ada still lives in Lisbon.")  # similarity 0.89, below 0.95
        assert body["created"] is False and body["reason"] == "confirmed_existing"
        assert body["id"] == str(lisbon.pk) and body["times_confirmed"] == 1
        assert body["consolidation"]["decision"] == "noop" and body["consolidation"]["new"] is None
        assert EpisodicEntry.objects.filter(memory_user=self.person).count() == 1
        lisbon.refresh_from_db()
        assert lisbon.status == "active" and lisbon.times_confirmed == 1 and lisbon.last_confirmed_at
        (audited,) = self.decisions(lisbon)
        assert audited["decision"] == "noop" and audited["old"] == str(lisbon.pk)

    def test_a_similar_but_different_claim_is_added_with_its_decision(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        body = self.create("Ada works in Lisbon.")  # similarity 0.75
        assert body["created"] is True
        assert body["consolidation"]["decision"] == "add" and body["consolidation"]["old"] == str(lisbon.pk)
        lisbon.refresh_from_db()
        assert lisbon.status == "active" and lisbon.valid_to is None
        assert sorted(self.listed()) == ["Ada lives in Lisbon.", "Ada works in Lisbon."]
        # Nothing changed on the stored entry: the decision is audited with the creation.
        assert self.decisions(lisbon) == []
        (audited,) = self.decisions(EpisodicEntry.objects.get(pk=body["id"]))
        assert audited["decision"] == "add" and audited["old"] == str(lisbon.pk) and audited["by"] == "rule"

    def test_an_unrelated_entry_is_added_without_a_decision(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        body = self.create("Ada adopted two cats last spring.")  # similarity 0.35
        assert body["created"] is True and body["consolidation"] is None
        assert self.decisions(lisbon) == []

    def test_an_assistant_finding_does_not_replace_what_the_person_said(self):
        lisbon = self.stored("Ada lives in Lisbon.", source="user_assertion")
        body = self.create("Ada now lives in Porto.", source="verified_assistant_finding", evidence="x")
        assert body["consolidation"]["decision"] == "add" and "weaker" in body["consolidation"]["reason"]
        lisbon.refresh_from_db()
        assert lisbon.status == "active"

    def test_the_extraction_path_consolidates_too(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        response = self.api().post(
            EXTRACT,
            self.body(
                transcript=[{"role": "user", "content": "I live in Porto now."}],
                candidates=[
                    {
                        "content": "Ada now lives in Porto.",
                        "source": "user_assertion",
                        "evidence": "Porto now",
                    }
                ],
                use_llm=False,
                sync=True,
            ),
            format="json",
        )
        assert response.status_code == 200, response.json()
        (stored,) = response.json()["stored"]
        assert stored["consolidation"]["decision"] == "supersede"
        assert EpisodicEntry.objects.get(pk=lisbon.pk).superseded_by_id is not None

    def test_a_restatement_in_an_extraction_is_rejected_as_a_confirmation(self):
        self.agent.memory_settings = {"dedupe_threshold": 0.95}
        self.agent.save(update_fields=["memory_settings"])
        lisbon = self.stored("Ada lives in Lisbon.")
        response = self.api().post(
            EXTRACT,
            self.body(
                transcript=[{"role": "user", "content": "Still in Lisbon."}],
                candidates=[
                    {
                        "content": "Ada still lives in Lisbon.",
                        "source": "user_assertion",
                        # A single word is no evidence (core.lib.evidence): the whole message.
                        "evidence": "Still in Lisbon.",
                    }
                ],
                use_llm=False,
                sync=True,
            ),
            format="json",
        )
        body = response.json()
        assert body["stored"] == []
        (rejected,) = body["rejected"]
        assert rejected["reason"] == "confirmed_existing" and rejected["duplicate_of"] == str(lisbon.pk)
        assert rejected["consolidation"]["decision"] == "noop"

    def test_the_batch_create_answers_each_decision(self):
        self.stored("Ada lives in Lisbon.")
        response = self.api().post(
            BATCH,
            self.body(items=[{"content": "Ada now lives in Porto."}, {"content": "Ada has a dog."}]),
            format="json",
        )
        results = response.json()["results"]
        assert results[0]["consolidation"]["decision"] == "supersede"
        assert results[1]["consolidation"] is None

    def test_another_persons_or_agents_similar_entry_never_consolidates(self):
        other_person = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        theirs = [
            entry_factory(agent=self.other_agent, memory_user=self.person, content="Ada lives in Lisbon."),
            entry_factory(agent=self.agent, memory_user=other_person, content="Ada lives in Lisbon."),
        ]
        body = self.create("Ada now lives in Porto.")
        assert body["created"] is True and body["consolidation"] is None
        for entry in theirs:
            entry.refresh_from_db()
            assert entry.status == "active" and entry.valid_to is None
            assert self.decisions(entry) == []


class RuleUnitTests(MemoryTestCase):
    def test_the_rule_reads_change_markers_negation_and_detail(self):
        cases = [
            ("Ada lives in Lisbon.", "Ada moved from Lisbon to Porto.", "supersede"),
            ("Ada lives in Lisbon.", "Ada no longer lives in Lisbon.", "supersede"),
            ("Ada eats meat.", "Ada doesn't eat meat.", "supersede"),
            ("Ada eats meat.", "Ada does not eat meat anymore.", "supersede"),
            ("Ada drinks coffee every morning.", "Ada drinks tea every morning.", "add"),  # the model's job
            ("Ada is vegetarian.", "Ada is not vegetarian.", "supersede"),
            ("Ada's flight is on 12 May.", "Ada's flight is on 14 May.", "supersede"),
            ("Ada moved to Lisbon.", "Ada moved to Lisbon in May.", "update"),
            ("Ada lives in Lisbon.", "Ada still lives in Lisbon.", "noop"),
            ("Ada lives in Lisbon.", "Ada works in Lisbon.", "add"),
        ]
        for old, new, expected in cases:
            with self.subTest(old=old, new=new):
                assert claim_rule(old_text=old, new_text=new)[0] == expected


class LLMTests(ConsolidationTestCase):
    """A chat endpoint configured: the model decides, through the real client."""

    def setUp(self):
        super().setUp()
        use_test_chat(self.server, self.workspace)

    def answer(self, decision, reason="Because."):
        self.server.chat_replies.append(json.dumps({"decision": decision, "reason": reason}))

    def chat_requests(self):
        return [body for path, body in self.server.requests if path.endswith("/chat/completions")]

    def test_the_model_supersedes(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        self.answer("supersede", "She moved to Porto.")
        body = self.create("Ada now lives in Porto.")
        assert body["consolidation"]["decision"] == "supersede" and body["consolidation"]["by"] == "llm"
        assert body["consolidation"]["reason"] == "She moved to Porto."
        (request,) = self.chat_requests()
        prompt = request["messages"][1]["content"]
        assert "Ada lives in Lisbon." in prompt and "Ada now lives in Porto." in prompt
        assert request["response_format"] == {"type": "json_object"}
        lisbon.refresh_from_db()
        assert lisbon.status == "superseded" and str(lisbon.superseded_by_id) == body["id"]
        assert self.decisions(lisbon)[0]["by"] == "llm"

    def test_the_model_never_retires_what_the_person_said_for_an_assistants_finding(self):
        """The source ranking holds whoever decides: the rule adds such a claim (above), and a
        model's supersede had closed the person's own statement."""
        lisbon = self.stored("Ada lives in Lisbon.", source="user_assertion")
        self.answer("supersede", "She moved to Porto.")
        body = self.create("Ada now lives in Porto.", source="verified_assistant_finding", evidence="x")
        assert body["consolidation"]["decision"] == "add" and body["consolidation"]["by"] == "llm"
        assert "weaker" in body["consolidation"]["reason"]
        lisbon.refresh_from_db()
        assert lisbon.status == "active"

    def test_the_model_updates(self):
        may = self.stored("Ada moved to Lisbon.")
        self.answer("update", "Adds the month.")
        body = self.create("Ada moved to Lisbon in May.")  # similarity 0.82
        assert body["consolidation"]["decision"] == "update"
        may.refresh_from_db()
        assert may.status == "superseded" and may.valid_to is not None

    def test_the_model_adds(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        self.answer("add", "Both can be true.")
        body = self.create("Ada now lives in Porto.")
        assert body["created"] is True and body["consolidation"]["decision"] == "add"
        lisbon.refresh_from_db()
        assert lisbon.status == "active"

    def test_the_model_finds_nothing_new(self):
        lisbon = self.stored("Ada lives in Lisbon.")
        self.answer("noop", "Same claim.")
        body = self.create("Ada works in Lisbon.")
        assert body["created"] is False and body["reason"] == "confirmed_existing"
        assert body["consolidation"] == {
            "decision": "noop",
            "reason": "Same claim.",
            "by": "llm",
            "old": str(lisbon.pk),
            "new": None,
            "similarity": 0.75,
        }
        assert EpisodicEntry.objects.filter(memory_user=self.person).count() == 1

    def test_a_malformed_answer_falls_back_to_the_rule(self):
        for reply in (
            "not json at all",
            json.dumps({"decision": "merge", "reason": "x"}),
            json.dumps({"decision": "add"}),
        ):
            with self.subTest(reply=reply):
                EpisodicEntry.objects.all().delete()
                lisbon = self.stored("Ada lives in Lisbon.")
                self.server.chat_replies.append(reply)
                body = self.create("Ada now lives in Porto.")
                record = body["consolidation"]
                assert record["by"] == "rule" and record["decision"] == "supersede"
                assert "unusable" in record["reason"]
                lisbon.refresh_from_db()
                assert lisbon.status == "superseded"

    def test_a_failing_endpoint_falls_back_to_the_rule(self):
        self.stored("Ada lives in Lisbon.")

        def embed_then_fail_the_chat(texts):
            self.server.fail_next = 1  # The next request, the consolidation's chat call, answers 500.
            return bag_of_words_vectors(texts)

        self.server.embedding_handler = embed_then_fail_the_chat
        body = self.create("Ada works in Lisbon.")
        assert body["consolidation"]["by"] == "rule" and body["consolidation"]["decision"] == "add"

    def test_no_model_call_without_a_similar_entry(self):
        self.stored("Ada lives in Lisbon.")
        self.create("Ada adopted two cats last spring.")
        assert self.chat_requests() == []

    def test_a_profile_fact_of_an_extraction_is_reconciled_across_keys(self):
        from facts.services import fact_remember

        fact_remember(
            workspace=self.workspace, key="city", value="Lisbon", scope="user", memory_user=self.person
        )
        self.server.chat_replies.append(
            json.dumps(
                {
                    "entries": [],
                    "facts": [{"key": "home_city", "value": "Porto", "evidence": "I live in Porto."}],
                }
            )
        )
        self.answer("supersede", "She moved.")
        response = self.api().post(
            EXTRACT,
            self.body(transcript=[{"role": "user", "content": "I live in Porto."}], sync=True),
            format="json",
        )
        (fact,) = response.json()["facts"]
        # Extraction never overwrites a fact: the model's supersede is kept alongside.
        assert fact["outcome"] == "created"
        assert fact["consolidation"]["decision"] == "add" and fact["consolidation"]["by"] == "llm"
        assert "overwrite is false" in fact["consolidation"]["reason"]


class StoreMemoryToolTests(ConsolidationTestCase):
    def test_the_tool_answers_the_decision(self):
        from core.access import principal_for_api_key
        from runtime import tools

        lisbon = self.stored("Ada lives in Lisbon.")
        result = tools.store_memory(
            principal=principal_for_api_key(self.agent_api_key),
            memory_user=str(self.person.pk),
            content="Ada now lives in Porto.",
        )
        assert result["created"] is True
        assert result["consolidation"]["decision"] == "supersede"
        assert result["consolidation"]["old"] == str(lisbon.pk)
