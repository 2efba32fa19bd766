"""An import leaves the marks its summaries' compactions would have left (SummarizedMessage,
never exported): the messages retention may delete are the same in the source and the copy."""

import json
from datetime import timedelta

from django.utils import timezone

from core.services import agent_get_or_create, agent_update, workspace_create
from core.testing import MemoryTestCase
from identities.tests.factories import MemoryUserFactory
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes
from retention.models import RetentionRule, Tier
from retention.selectors import retention_preview
from threads.models import Message, NodeSummary, Thread
from threads.services import thread_compact
from threads.tests.factories import append, make_thread

OLD = timezone.now() - timedelta(days=40)


def turns(label, count, first="user"):
    other = "assistant" if first == "user" else "user"
    return [(first if i % 2 == 0 else other, f"{label} turn {i}, invoice {i}.") for i in range(count)]


def lines(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def marks(workspace) -> set:
    """The held messages of a workspace, named by what survives an import (thread, scope, seq)."""
    return set(
        Message.objects.summarized()
        .filter(workspace=workspace)
        .values_list("thread__title", "node_id", "seq")
    )


def messages_deleted(workspace) -> int:
    return retention_preview(workspace=workspace)["deletes"]["messages"]


class SummaryMarksImportTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        agent_update(agent=cls.agent, memory_settings={"recent_messages": 4})
        ada = MemoryUserFactory(workspace=cls.workspace, canonical_id="t:ada")
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent, memory_user=ada, title="Trip")
        first = append(cls.thread, *turns("Old", 8))
        # An edited turn 3: both branches read depths 0 to 2, which no summary holds alone.
        append(
            cls.thread,
            {"role": "user", "content": "Edited turn 3 about Lisbon.", "parent": str(first[2].pk)},
            *turns("Lisbon", 12, first="assistant"),
        )
        assert thread_compact(thread_id=cls.thread.pk) == "compacted"
        # A sub-agent's own history, summarized in its NodeSummary.
        node = append(
            cls.thread,
            {"role": "user", "content": "Research Paris hotels.", "parent": str(first[-1].pk)},
            *turns("Paris", 9, first="assistant"),
            node_id="researcher",
        )
        assert node
        NodeSummary.objects.create(workspace_id=cls.workspace.pk, thread=cls.thread, node_id="researcher")
        assert thread_compact(thread_id=cls.thread.pk, node="researcher") == "compacted"
        Message.objects.filter(workspace=cls.workspace).update(created_at=OLD)
        cls.held = marks(cls.workspace)
        assert {scope for _title, scope, _seq in cls.held} == {"", "researcher"}
        assert (
            Message.objects.filter(workspace=cls.workspace)
            .exclude(pk__in=Message.objects.summarized())
            .exists()
        )

    def setUp(self):
        self.target = workspace_create(name="Target")
        for workspace in (self.workspace, self.target):
            RetentionRule.objects.create(workspace=workspace, tier=Tier.MESSAGES, max_age_days=30)
        agent_update(
            agent=agent_get_or_create(workspace=self.target, slug=self.agent.slug),
            memory_settings={"recent_messages": 4},
        )

    def assert_same_marks(self):
        assert marks(self.target) == self.held
        deleted = messages_deleted(self.workspace)
        assert deleted == len(self.held)
        assert messages_deleted(self.target) == deleted

    def test_an_imported_thread_keeps_the_marks_of_its_summaries(self):
        """The thread's and the node's summaries hold the same messages in the copy."""
        report = import_bytes(self.target, export_bytes(Scope(workspace=self.workspace)))
        assert report["created"]["message"] == Message.objects.filter(workspace=self.workspace).count()
        self.assert_same_marks()

    def test_an_agents_export_and_a_second_import_keep_the_marks(self):
        data = export_bytes(Scope(workspace=self.workspace, agent=self.agent))
        import_bytes(self.target, data)
        report = import_bytes(self.target, data)
        assert report["created"] == {}
        self.assert_same_marks()

    def test_a_restored_thread_takes_its_marks_back(self):
        """A restore into the workspace it came from brings back the lost thread with its
        marks, and leaves the others' as they were."""
        data = export_bytes(Scope(workspace=self.workspace))
        Thread.objects.filter(pk=self.thread.pk).delete()
        assert not marks(self.workspace)
        import_bytes(self.workspace, data)
        assert marks(self.workspace) == self.held
