"""A summary's marks never block the deletion of their messages: a compaction that commits a
mark while a thread (or a person, by erasure) is being deleted neither makes the deletion fail
nor leaves a mark behind."""

import threading
from unittest import mock

from django.db import OperationalError, connections, transaction
from django.db.models.query import QuerySet
from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from identities.services import memory_user_create, memory_user_erase
from threads.models import Message, SummarizedMessage, Thread
from threads.services import thread_delete
from threads.services.compaction import _summary_held_mark
from threads.tests.factories import append, make_thread


def _elsewhere(work):
    """Run `work(cursor)` on a connection of its own (another worker), committed at its end;
    returns what it returned, or the exception it raised."""
    outcome = {}

    def run():
        try:
            with transaction.atomic(), connections["default"].cursor() as cursor:
                outcome["value"] = work(cursor)
        except Exception as exc:  # handed back to the test
            outcome["value"] = exc
        finally:
            connections["default"].close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return outcome["value"]


class MarkDeletionRaceTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Marks and deletions")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_create(workspace=self.workspace, canonical_id="ada")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.messages = append(
            self.thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(8)]
        )
        end = self.messages[5]
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="- earlier turns", summary_upto_id=end.pk, summary_upto_depth=end.depth
        )
        with transaction.atomic():
            _summary_held_mark(thread_id=self.thread.pk, scope="", upto_id=end.pk, extends=False)
        assert SummarizedMessage.objects.filter(thread_id=self.thread.pk).count() == 5

    def _deleting(self, during):
        """Patch the marks' delete of a deletion so that `during` runs on another connection
        right after it: the moment a compaction that did not see the deletion commits."""
        raw_delete = QuerySet._raw_delete
        seen = []

        def marks_deleted(queryset, using):
            count = raw_delete(queryset, using)
            if queryset.model is SummarizedMessage and not seen:
                seen.append(_elsewhere(during))
            return count

        return seen, mock.patch.object(QuerySet, "_raw_delete", marks_deleted)

    def _mark_committed(self, cursor):
        # A later compaction's walk marks the turns it newly covers.
        later = self.messages[6]
        cursor.execute(
            "INSERT INTO threads_summarizedmessage (message_id, thread_id, node_id, depth)"
            " VALUES (%s, %s, '', %s)",
            [later.pk, self.thread.pk, later.depth],
        )

    def test_a_mark_committed_while_a_thread_is_deleted_goes_with_its_message(self):
        """The deletion found no mark to delete for that message, and still succeeds."""
        seen, patched = self._deleting(self._mark_committed)
        with patched:
            counts = thread_delete(thread=self.thread, actor="test")
        assert seen == [None]
        assert counts["messages"] == 8
        assert not Message.objects.filter(thread_id=self.thread.pk).exists()
        assert not SummarizedMessage.objects.filter(thread_id=self.thread.pk).exists()

    def test_a_mark_committed_while_a_person_is_erased_goes_with_its_message(self):
        """Erasure deletes the person's threads through the same cascade."""
        seen, patched = self._deleting(self._mark_committed)
        with patched:
            memory_user_erase(memory_user=self.person, actor="test")
        assert seen == [None]
        assert not Thread.objects.filter(pk=self.thread.pk).exists()
        assert not SummarizedMessage.objects.filter(thread_id=self.thread.pk).exists()

    def test_a_compaction_cannot_mark_a_thread_that_is_being_deleted(self):
        """The deletion holds the thread row from its start, as an append or a compaction
        does: a compaction waits for it, then finds no thread to write a summary into."""

        def compaction_lock(cursor):
            cursor.execute("SELECT 1 FROM threads_thread WHERE id = %s FOR UPDATE NOWAIT", [self.thread.pk])

        seen, patched = self._deleting(compaction_lock)
        with patched:
            thread_delete(thread=self.thread, actor="test")
        assert isinstance(seen[0], OperationalError)
        assert "could not obtain lock" in str(seen[0])


class MarkWhileRetentionDeletesTests(TransactionTestCase):
    def test_a_compaction_skips_a_message_deleted_while_it_marks(self):
        """A message deleted (and committed) while the compaction's walk still saw it is left
        out of the marks; the compaction's summary is written, not failed on the foreign key."""
        workspace = workspace_create(name="Marks and retention")
        agent = agent_register(workspace=workspace, slug="support")
        thread = make_thread(workspace=workspace, agent=agent)
        messages = append(thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(8)])
        gone, end = messages[2], messages[5]
        started, outcome = threading.Event(), {}

        def compaction():
            try:
                with connections["default"].cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    outcome["pid"] = cursor.fetchone()[0]
                started.set()
                with transaction.atomic():
                    _summary_held_mark(thread_id=thread.pk, scope="", upto_id=end.pk, extends=False)
                outcome["error"] = None
            except Exception as exc:  # handed back to the test
                outcome["error"] = exc
            finally:
                started.set()
                connections["default"].close()

        worker = threading.Thread(target=compaction)
        with transaction.atomic():
            # As retention deletes a message: its children detached, then the row.
            Message.objects.filter(parent=gone).update(parent=None)
            Message.objects.filter(pk=gone.pk).delete()
            worker.start()
            started.wait()
            # The deletion commits only once the compaction waits for its row lock.
            with connections["default"].cursor() as cursor:
                while worker.is_alive():
                    cursor.execute(
                        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)",
                        [outcome["pid"]],
                    )
                    if cursor.fetchone()[0]:
                        break
                    worker.join(0.01)
        worker.join()
        assert outcome["error"] is None
        held = set(SummarizedMessage.objects.filter(thread_id=thread.pk).values_list("message_id", flat=True))
        assert held == {messages[i].pk for i in (0, 1, 3, 4)}
