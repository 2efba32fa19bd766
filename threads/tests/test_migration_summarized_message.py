"""Migration 0010 records the messages existing summaries hold alone (SummarizedMessage), and
touches no message either way."""

import importlib
from unittest import mock

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from core.testing import migrate_to
from threads.models import Message, NodeSummary, Thread
from threads.tests.factories import append, make_thread

BEFORE = [("threads", "0009_messageembedding_in_graph")]
HELD = importlib.import_module("threads.migrations.0010_summarizedmessage")


class SummaryHeldMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_existing_summaries_mark_their_branch_above_the_fork_and_no_message_is_lost(self):
        workspace = workspace_create(name="Before summaries marked their messages")
        agent = agent_register(workspace=workspace, slug="support")
        threads, expected = [], set()
        for _ in range(3):
            thread = make_thread(workspace=workspace, agent=agent)
            main = append(thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(8)])
            # An edit at depth 1: depths 0 and 1 are read by both branches.
            append(thread, {"role": "user", "content": "Edited turn 2.", "parent": str(main[1].pk)})
            Thread.objects.filter(pk=thread.pk).update(
                summary="- earlier turns", summary_upto_id=main[5].pk, summary_upto_depth=5
            )
            expected |= {m.pk for m in main[2:5]}
            threads.append(thread)
        # A node's summary, its first message a child of a main turn.
        node = append(
            threads[0],
            *[("assistant", f"Node step {i}.") for i in range(4)],
            node_id="researcher",
        )
        NodeSummary.objects.create(
            workspace=workspace,
            thread=threads[0],
            node_id="researcher",
            summary="- steps",
            summary_upto_id=node[2].pk,
            summary_upto_depth=node[2].depth,
        )
        expected |= {node[0].pk, node[1].pk}
        # A summary whose last message is gone marks nothing.
        orphan = make_thread(workspace=workspace, agent=agent)
        append(orphan, ("user", "Alone."))
        Thread.objects.filter(pk=orphan.pk).update(
            summary="- gone", summary_upto_id=threads[0].pk, summary_upto_depth=3
        )
        count = Message.objects.count()

        migrate_to(BEFORE)
        with mock.patch.object(HELD, "BATCH", 2):  # more than one batch of threads
            migrate_to()
        assert set(Message.objects.summarized().values_list("pk", flat=True)) == expected
        assert Message.objects.count() == count
        migrate_to(BEFORE)
        old_message = (
            MigrationExecutor(connection).loader.project_state(BEFORE).apps.get_model("threads", "Message")
        )
        assert old_message.objects.count() == count
        migrate_to()
        assert Message.objects.count() == count
        assert Message.objects.summarized().count() == len(expected)

    def test_a_mark_goes_with_its_message_in_the_database(self):
        """A deletion that did not collect the mark (it was committed after): the database takes
        it along instead of refusing the deletion at commit."""
        workspace = workspace_create(name="Marks that block a deletion")
        agent = agent_register(workspace=workspace, slug="support")
        thread = make_thread(workspace=workspace, agent=agent)
        main = append(thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(6)])
        Thread.objects.filter(pk=thread.pk).update(
            summary="- earlier turns", summary_upto_id=main[4].pk, summary_upto_depth=4
        )
        migrate_to(BEFORE)
        migrate_to()
        count = Message.objects.count()
        assert Message.objects.summarized().count() == 4
        with connection.cursor() as cursor:
            cursor.execute("UPDATE threads_message SET parent_id = NULL WHERE parent_id = %s", [main[0].pk])
            cursor.execute("DELETE FROM threads_message WHERE id = %s", [main[0].pk])
            cursor.execute(
                "SELECT count(*) FROM threads_summarizedmessage WHERE message_id = %s", [main[0].pk]
            )
            assert cursor.fetchone()[0] == 0
        assert Message.objects.count() == count - 1
        assert Message.objects.summarized().count() == 3
