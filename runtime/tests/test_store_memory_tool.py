"""The `store_memory` agent tool: an episodic entry stored directly, through the same service
as POST /api/v1/episodic-entries/ (issue 18 item 3)."""

import uuid

from core.access import principal_for_api_key
from core.errors import ApplicationError
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import EVIDENCE_REQUIRED, REJECT_DUPLICATE_HASH
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from runtime import tools
from threads.services import thread_append_messages, thread_create


class StoreMemoryToolTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def principal(self, api_key=None):
        return principal_for_api_key(api_key or self.agent_api_key)

    def store(self, api_key=None, **kwargs):
        kwargs.setdefault("memory_user", str(self.person.pk))
        return tools.store_memory(principal=self.principal(api_key), **kwargs)

    def test_is_registered_as_a_writing_tool(self):
        (spec,) = [s for s in tools.TOOLS if s.name == "store_memory"]
        assert spec.read_only is False and "evidence" in spec.description

    def test_stores_an_entry_without_evidence_for_the_keys_agent(self):
        result = self.store(content="Ada starts a pottery class on\u200b Tuesday.")
        assert result["created"] is True
        assert result["entry"]["content"] == "Ada starts a pottery class on Tuesday."
        assert result["entry"]["source"] == "agent_direct" and result["entry"]["embedded"] is True
        entry = EpisodicEntry.objects.get(pk=result["entry"]["id"])
        assert entry.agent == self.agent and entry.memory_user == self.person

    def test_a_duplicate_is_not_stored_twice(self):
        first = self.store(content="Ada starts a pottery class on Tuesday.")
        again = self.store(content="ada starts a pottery class on tuesday.")
        assert again["created"] is False and again["reason"] == REJECT_DUPLICATE_HASH
        assert again["entry"]["id"] == first["entry"]["id"]
        assert EpisodicEntry.objects.count() == 1

    def test_the_thread_names_the_person_and_the_message_checks_the_evidence(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        (message,) = thread_append_messages(
            thread=thread, messages=[{"role": "user", "content": "I got the job at the observatory!"}]
        )
        result = tools.store_memory(
            principal=self.principal(),
            thread=str(thread.pk),
            content="Got a job at the observatory.",
            source="user_assertion",
            evidence="the job at the observatory",
            source_message=str(message.pk),
        )
        assert result["created"] is True
        entry = EpisodicEntry.objects.get(pk=result["entry"]["id"])
        assert entry.source_thread == thread and entry.source_message_ids == [str(message.pk)]

    def test_bad_arguments_are_field_errors(self):
        cases = [
            ({"content": ""}, "content"),
            ({"content": "x" * 5000}, "content"),
            ({"content": 5}, "content"),
            ({"content": "Ada got a dog.", "source": "user_assertion"}, "evidence"),
            ({"content": "Ada got a dog.", "source": "rumour"}, "source"),
        ]
        for kwargs, field in cases:
            with self.assertRaises(Exception) as caught:
                self.store(**kwargs)
            detail = getattr(caught.exception, "fields", None) or getattr(caught.exception, "detail", {})
            assert field in detail, (kwargs, caught.exception)
        with self.assertRaises(ApplicationError) as caught:
            self.store(content="Ada got a dog.", source="user_assertion")
        assert caught.exception.fields == {"evidence": [EVIDENCE_REQUIRED]}
        assert not EpisodicEntry.objects.exists()

    def test_needs_a_person(self):
        with self.assertRaises(ApplicationError) as caught:
            tools.store_memory(principal=self.principal(), content="Ada likes jazz.")
        assert "memory_user" in caught.exception.fields

    def test_isolation(self):
        """Read-only key refused; another agent or workspace answers like an unknown row."""
        with self.assertRaises(ApplicationError) as caught:
            self.store(api_key=self.read_only_api_key, agent="assistant", content="Ada likes jazz.")
        assert caught.exception.status_code == 403
        with self.assertRaises(ApplicationError) as caught:
            self.store(content="Ada likes jazz.", agent="researcher")
        assert caught.exception.status_code == 404
        with self.assertRaises(ApplicationError) as caught:
            self.store(api_key=self.outsider_api_key, agent="assistant", content="Ada likes jazz.")
        assert caught.exception.status_code == 404
        other_thread = thread_create(
            workspace=self.workspace, agent=self.other_agent, memory_user=self.person
        )
        (message,) = thread_append_messages(
            thread=other_thread, messages=[{"role": "user", "content": "Hi."}]
        )
        with self.assertRaises(ApplicationError) as theirs:
            self.store(content="Ada said hi.", source_message=str(message.pk))
        with self.assertRaises(ApplicationError) as unknown:
            self.store(content="Ada said hi.", source_message=str(uuid.uuid4()))
        assert (theirs.exception.status_code, theirs.exception.fields) == (
            unknown.exception.status_code,
            unknown.exception.fields,
        )
        assert not EpisodicEntry.objects.exists()

    def test_a_source_filter_from_python_is_checked_as_from_a_model(self):
        """Python callers skip the tools' JSON Schema: a kind that is not one, or a list of
        lists, is the same 400 naming `source`, not a TypeError."""
        person = {"memory_user": str(self.person.pk)}
        for tool in (tools.recall_memory, tools.search):
            for source in (["gossip"], [["user_assertion"]], "user_assertion", [None]):
                with (
                    self.subTest(tool=tool.__name__, source=source),
                    self.assertRaises(ApplicationError) as caught,
                ):
                    tool(principal=self.principal(), query="Porto", source=source, **person)
                assert "source" in caught.exception.fields

    def test_labels_are_stored_and_filter_the_memory_searches(self):
        """`metadata` is stored with the note (beside the `origin` every direct note gets), and
        recall_memory and search keep only the notes that carry it."""
        tagged = self.store(content="Ada is planning the Porto offsite.", metadata={"project": "alpha"})
        self.store(content="Ada is planning a holiday in Porto.")
        entry = EpisodicEntry.objects.get(pk=tagged["entry"]["id"])
        assert entry.metadata == {"project": "alpha", "origin": "direct"}
        person = {"memory_user": str(self.person.pk)}
        for tool, extra in ((tools.recall_memory, {}), (tools.search, {"mode": "lexical"})):
            with self.subTest(tool=tool.__name__):
                found = tool(principal=self.principal(), query="Porto", **person, **extra)
                assert len(found["results"]) == 2
                found = tool(
                    principal=self.principal(),
                    query="Porto",
                    metadata={"project": "alpha"},
                    **person,
                    **extra,
                )
                assert [hit["id"] for hit in found["results"]] == [tagged["entry"]["id"]]
