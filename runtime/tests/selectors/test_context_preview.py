"""The context preview (issue 15 item 3): what POST /api/v1/context/ would return, explained,
and read-only.

- `context_build(explain=True)` keeps the blocks as they are and says, per block, why each
  item was chosen (the lexical, vector and recency parts of an entry's fused score, a fact's
  confidence, a procedure's condition score) and what the cap cut.
- `context_preview` writes nothing: no row, no access count, no audit event, no on-commit
  task; PostgreSQL refuses a write attempted on its path.
- Its blocks are exactly the API's for the same inputs.
"""

from unittest import mock

import pytest
from django.db import DatabaseError
from django.urls import reverse

from core.access import principal_for_membership
from core.context_preview import context_preview
from core.errors import NotFoundError
from core.models import AuditEvent, Membership
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from core.tests.reliability.routes import snapshot, snapshot_diff
from episodic.tests.factories import entry_factory, use_test_embeddings
from facts.models import Fact
from procedures.services import procedure_create
from runtime.selectors import context_build
from runtime.tests.factories import conversation, person, session_fact, user_fact
from threads.selectors import MemoryContext
from threads.services import thread_plan_set

URL = reverse("api:runtime:context")
MESSAGE = "I want a refund for the cat food"


class ContextPreviewTestCase(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")
        cls.other_person = person(cls.workspace, external_id="2002", display_name="Grace")
        cls.thread = conversation(cls.workspace, cls.agent, cls.person, turns=12)
        user_fact(cls.workspace, cls.person, "preferred_language", "French", fact_type="user_preference")
        for index in range(30):
            user_fact(cls.workspace, cls.person, f"hobby_{index}", f"hobby number {index} " * 4)
        session_fact(cls.workspace, cls.thread, "current_ticket", "T-1234")
        thread_plan_set(thread=cls.thread, plan={"steps": ["refund the order"]})
        procedure_create(
            workspace=cls.workspace,
            name="Refund policy",
            procedure_type="prompt_template",
            content="Check the order date; refunds within 30 days only.",
            trigger_conditions={"goal_contains": ["refund"]},
        )
        cls.membership = Membership.objects.get(workspace=cls.workspace, user=cls.owner)

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.entries = [
            entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a cat named Miso."),
            entry_factory(agent=self.agent, memory_user=self.person, content="Ada buys cat food in bulk."),
            entry_factory(agent=self.agent, memory_user=self.person, content="Ada moved to Lisbon in May."),
        ]
        self.principal = principal_for_membership(self.membership)

    def preview(self, **kwargs):
        kwargs = {
            "principal": self.principal,
            "agent": "assistant",
            "memory_user": self.person.pk,
            "thread": self.thread.pk,
            "message": MESSAGE,
            "token_budget": 1500,
            **kwargs,
        }
        return context_preview(**kwargs)


class ExplainTests(ContextPreviewTestCase):
    def test_every_kept_item_is_explained_and_every_cut_one_says_why(self):
        preview = self.preview()
        data, explanation = preview.data, preview.explanation
        for name in ("user_profile", "session_memory", "memory", "procedures"):
            chosen = [row["id"] for row in explanation[name]["chosen"]]
            assert chosen == [str(item["id"]) for item in data[name]["items"]], name
            assert all(row["reason"] for row in explanation[name]["chosen"]), name
        # The small budget cuts profile facts: each is listed with the cap that cut it.
        profile = explanation["user_profile"]
        assert data["user_profile"]["omitted"] == len(profile["cut"]) > 0
        cap = data["user_profile"]["cap"]
        assert all(f"cap of {cap} tokens" in row["reason"] for row in profile["cut"])
        assert profile["chosen"][0]["label"] == "preferred_language: French"
        assert profile["chosen"][0]["score"] == data["user_profile"]["items"][0]["confidence"]

    def test_memory_items_carry_the_parts_of_their_fused_score(self):
        memory = self.preview().explanation["memory"]
        rows = memory["chosen"]
        labels = {row["label"] for row in rows}
        assert labels >= {"Ada buys cat food in bulk.", "Ada adopted a cat named Miso."}
        best = rows[0]
        assert best["label"] == "Ada buys cat food in bulk."
        assert best["lexical"] > 0 and 0 < best["vector"] <= 1 and 0 < best["recency"] <= 0.1
        assert best["score"] >= rows[-1]["score"]
        assert "Rank 1 of 3 candidates" in best["reason"]

    def test_a_memory_cap_too_small_for_an_entry_lists_it_as_cut(self):
        result = context_build(
            context=MemoryContext(
                workspace=self.workspace, agent=self.agent, memory_user=self.person, thread=self.thread
            ),
            message=MESSAGE,
            token_budget=1000,
            allocation={"memory": 0.045},
            explain=True,
        )
        memory = result.explanation["memory"]
        assert result.sections["memory"].omitted == len(memory["cut"]) > 0
        assert all("Left out" in row["reason"] and row["lexical"] is not None for row in memory["cut"])

    def test_procedures_say_which_conditions_matched(self):
        (row,) = self.preview().explanation["procedures"]["chosen"]
        assert row["label"] == "Refund policy" and "goal_contains" in row["reason"] and row["score"] > 0

    def test_empty_blocks_say_why(self):
        explanation = self.preview(memory_user=None, thread=None, message="").explanation
        assert explanation["user_profile"]["note"].startswith("No person")
        assert explanation["memory"]["note"].startswith("No person")
        assert explanation["session_memory"]["note"].startswith("No thread")
        assert explanation["procedures"]["note"].startswith("No incoming message")
        assert explanation["history"]["note"].startswith("No thread")

    def test_explain_leaves_the_blocks_as_they_are(self):
        context = MemoryContext(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, thread=self.thread
        )
        plain = context_build(context=context, message=MESSAGE, token_budget=1500)
        explained = context_build(context=context, message=MESSAGE, token_budget=1500, explain=True)
        for name in plain.sections:
            assert plain.sections[name].as_dict() == explained.sections[name].as_dict(), name
        assert plain.history == explained.history


class SameAsTheApiTests(ContextPreviewTestCase):
    def api_body(self, **body):
        response = self.api().post(URL, {"agent": "assistant", "token_budget": 1500, **body}, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def assert_same(self, preview, body):
        data = dict(preview.data)
        data.pop("timings_ms")
        body.pop("timings_ms")
        assert data == body

    def test_the_preview_is_what_post_context_returns(self):
        preview = self.preview()
        body = self.api_body(memory_user=str(self.person.pk), thread=str(self.thread.pk), message=MESSAGE)
        self.assert_same(preview, body)
        assert body["memory"]["items"] and body["procedures"]["items"] and body["history"]["messages"]

    def test_without_a_thread_it_continues_the_thread_the_api_continues(self):
        preview = self.preview(thread=None)
        assert preview.thread_found and preview.data["thread"] == str(self.thread.pk)
        self.assert_same(preview, self.api_body(memory_user=str(self.person.pk), message=MESSAGE))

    def test_a_node_reads_what_the_api_reads_for_it(self):
        preview = self.preview(node="planner")
        body = self.api_body(
            memory_user=str(self.person.pk), thread=str(self.thread.pk), message=MESSAGE, node="planner"
        )
        self.assert_same(preview, body)


class ReadOnlyTests(ContextPreviewTestCase):
    def test_nothing_is_written_counted_audited_or_enqueued(self):
        before = snapshot(self.workspace)
        audit = AuditEvent.objects.count()
        reads = Fact.objects.values_list("pk", "access_count", "last_accessed_at").order_by("pk")
        touched = list(reads)
        with self.captureOnCommitCallbacks() as callbacks:
            preview = self.preview(thread=None)
            self.preview(memory_user=self.other_person.pk, thread=None)  # no thread yet: none is made
        assert preview.data["user_profile"]["items"]
        assert callbacks == []
        assert snapshot_diff(before, snapshot(self.workspace)) == []
        assert AuditEvent.objects.count() == audit
        assert list(reads.all()) == touched

    def test_a_write_on_its_path_is_refused_by_the_database(self):
        def writing_build(**kwargs):
            Fact.objects.filter(pk=Fact.objects.first().pk).update(access_count=99)

        with (
            mock.patch("runtime.selectors.preview.context_build", writing_build),
            pytest.raises(DatabaseError, match="read-only transaction"),
        ):
            self.preview()
        assert not Fact.objects.filter(access_count=99).exists()

    def test_ids_of_another_workspace_answer_like_missing_ones(self):
        stranger = person(self.other_workspace, external_id="3003", display_name="Eve")
        for kwargs in (
            {"memory_user": stranger.pk},
            {"thread": conversation(self.other_workspace, self.outsider_agent, stranger, turns=1).pk},
            {"agent": "no-such-agent"},
        ):
            with pytest.raises(NotFoundError):
                self.preview(**kwargs)

    def test_a_thread_of_another_person_is_refused(self):
        with pytest.raises(NotFoundError) as raised:
            self.preview(memory_user=self.other_person.pk)
        assert raised.value.fields == {"thread": ["This thread belongs to another person."]}
