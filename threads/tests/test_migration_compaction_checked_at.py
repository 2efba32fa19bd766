"""Migration 0011 gives threads and node summaries `compaction_checked_at`, filled from
`compacted_at`, and loses no thread, node summary or message either way."""

import importlib
from datetime import timedelta
from unittest import mock

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import agent_register, workspace_create
from core.testing import migrate_to
from threads.models import Message, NodeSummary, Thread
from threads.tests.factories import append, make_thread

BEFORE = [("threads", "0010_summarizedmessage")]
CHECKED = importlib.import_module("threads.migrations.0011_compaction_checked_at")


class CompactionCheckedMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_compacted_rows_count_as_checked_then_and_no_row_is_lost(self):
        workspace = workspace_create(name="Before up-to-date answers were recorded")
        agent = agent_register(workspace=workspace, slug="support")
        then = timezone.now() - timedelta(hours=3)
        compacted, never = [], []
        for index in range(5):
            thread = make_thread(workspace=workspace, agent=agent)
            append(thread, ("user", f"Turn {index}."), ("assistant", "Noted."))
            (compacted if index % 2 == 0 else never).append(thread.pk)
        migrate_to(BEFORE)
        state = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        old_thread = state.get_model("threads", "Thread")
        old_node = state.get_model("threads", "NodeSummary")
        old_thread.objects.filter(pk__in=compacted).update(compacted_at=then)
        old_node.objects.create(
            workspace_id=workspace.pk, thread_id=compacted[0], node_id="a", compacted_at=then
        )
        old_node.objects.create(workspace_id=workspace.pk, thread_id=never[0], node_id="b")

        with mock.patch.object(CHECKED, "BATCH", 2):  # two batches of threads
            migrate_to()

        checked = dict(Thread.objects.values_list("pk", "compaction_checked_at"))
        assert checked == {**dict.fromkeys(compacted, then), **dict.fromkeys(never)}
        nodes = dict(NodeSummary.objects.values_list("node_id", "compaction_checked_at"))
        assert nodes == {"a": then, "b": None}
        assert Message.objects.count() == 10
        migrate_to(BEFORE)
        assert old_thread.objects.count() == 5
        assert old_node.objects.count() == 2
        assert old_thread.objects.filter(compacted_at=then).count() == 3
        migrate_to()
        assert Thread.objects.count() == 5 and Message.objects.count() == 10
