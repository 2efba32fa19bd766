"""Migration 0012 turns `compaction_checked_at` into the `last_activity_at` a compaction saw:
rows checked since their thread's last append keep counting as checked, rows with an append
since stay asked for, and no thread, node summary or message is lost either way."""

import importlib
import uuid
from datetime import timedelta
from unittest import mock

import psycopg
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import agent_register, workspace_create
from core.testing import database_url, migrate_to
from threads.models import Message, NodeSummary, Thread
from threads.tests.factories import append, make_thread

BEFORE = [("threads", "0011_compaction_checked_at")]
MIGRATION = importlib.import_module("threads.migrations.0012_compaction_checked_as_activity")


class CompactionCheckedAsActivityMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_checked_rows_equal_their_threads_activity_and_no_row_is_lost(self):
        workspace = workspace_create(name="Checked by a worker's clock")
        agent = agent_register(workspace=workspace, slug="support")
        threads = []
        for index in range(5):
            thread = make_thread(workspace=workspace, agent=agent)
            append(thread, ("user", f"Turn {index}."), ("assistant", "Noted."))
            threads.append(thread.pk)
        migrate_to(BEFORE)
        state = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        old_thread = state.get_model("threads", "Thread")
        old_node = state.get_model("threads", "NodeSummary")
        activity = timezone.now() - timedelta(hours=2)
        old_thread.objects.update(last_activity_at=activity)
        checked, appended_since = threads[:3], threads[3:4]  # threads[4] was never checked
        old_thread.objects.filter(pk__in=checked).update(
            compaction_checked_at=activity + timedelta(seconds=3)
        )
        old_thread.objects.filter(pk__in=appended_since).update(
            compaction_checked_at=activity - timedelta(minutes=5)
        )
        for node_id, thread_id, at in (
            ("a", threads[0], activity + timedelta(seconds=1)),
            ("b", threads[1], activity - timedelta(seconds=1)),
            ("c", threads[2], None),
        ):
            old_node.objects.create(
                workspace_id=workspace.pk, thread_id=thread_id, node_id=node_id, compaction_checked_at=at
            )

        with mock.patch.object(MIGRATION, "BATCH", 2):  # two batches of threads
            migrate_to()

        values = dict(Thread.objects.values_list("pk", "compaction_checked_at"))
        assert values == {
            **dict.fromkeys(checked, activity),
            appended_since[0]: activity - timedelta(minutes=5),
            threads[4]: None,
        }
        nodes = dict(NodeSummary.objects.values_list("node_id", "compaction_checked_at"))
        assert nodes == {"a": activity, "b": activity - timedelta(seconds=1), "c": None}
        assert Message.objects.count() == 10
        migrate_to(BEFORE)
        assert old_thread.objects.count() == 5 and old_node.objects.count() == 3
        migrate_to()
        assert Thread.objects.count() == 5 and NodeSummary.objects.count() == 3
        assert Message.objects.count() == 10

    def test_each_chunk_commits_before_the_next_one_runs(self):
        """Not one transaction: a thread the first chunk turned is free for an append while the
        migration walks the others."""
        workspace = workspace_create(name="Many threads")
        agent = agent_register(workspace=workspace, slug="support")
        for index in range(3):
            append(make_thread(workspace=workspace, agent=agent), ("user", f"Turn {index}."))
        migrate_to(BEFORE)
        state = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        old_thread = state.get_model("threads", "Thread")
        activity = timezone.now() - timedelta(hours=2)
        old_thread.objects.update(
            last_activity_at=activity, compaction_checked_at=activity + timedelta(seconds=3)
        )
        first = old_thread.objects.order_by("pk").values_list("pk", flat=True).first()
        seen = []
        real_execute = CursorWrapper.execute

        def execute(cursor, sql, params=None):
            if sql == MIGRATION.THREADS and params and params[0] != uuid.UUID(int=0):
                # The second chunk is about to run: is the first chunk's thread free?
                seen.append((connection.in_atomic_block, _row_locked_elsewhere(Thread, first)))
            return real_execute(cursor, sql, params)

        with mock.patch.object(MIGRATION, "BATCH", 1), mock.patch.object(CursorWrapper, "execute", execute):
            migrate_to()

        assert seen and seen[0] == (False, False)
        assert set(Thread.objects.values_list("compaction_checked_at", flat=True)) == {activity}


def _row_locked_elsewhere(model, pk) -> bool:
    """Whether another connection waiting at most 200 ms fails to lock the row."""
    with psycopg.connect(database_url()) as other, other.cursor() as cursor:
        cursor.execute("SET lock_timeout = '200ms'")
        try:
            cursor.execute(f"SELECT 1 FROM {model._meta.db_table} WHERE id = %s FOR UPDATE", [pk])
        except psycopg.errors.LockNotAvailable:
            return True
        return False
