"""An append that forks from a message a summary holds, at the same time as retention's
deletion batch of that thread, on two connections: neither waits for the other in a cycle
(no deadlock), and no message that no summary holds is lost. Whichever starts first wins: an
append in progress keeps retention off its thread for that batch; a batch in progress deletes
the held messages, and the append that forked from one of them then answers a 400 naming its
parent instead of failing on the foreign key at commit."""

import threading
from datetime import timedelta
from unittest import mock

from django.db import connection, connections, transaction
from django.db.models.query import QuerySet
from django.test import TransactionTestCase
from django.utils import timezone

from core.errors import ApplicationError
from core.services import agent_register, workspace_create
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_rules_effective
from retention.services import _apply_rule
from threads.models import Message, SummarizedMessage, Thread
from threads.services.compaction import _summary_held_mark
from threads.services.messages import PARENT_UNKNOWN
from threads.tests.factories import append, make_thread


class Elsewhere:
    """`work()` on a connection of its own (another worker), committed at its end."""

    def __init__(self, work):
        self.work = work
        self.outcome = {}
        self.ready = threading.Event()
        self.worker = threading.Thread(target=self._run)

    def _run(self):
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.ready.set()
            self.outcome["value"] = self.work()
        except Exception as exc:  # handed back to the test
            self.outcome["error"] = exc
        finally:
            self.ready.set()
            connections["default"].close()

    def start(self):
        """Start the work and return once it waits for a lock or has finished."""
        self.worker.start()
        self.ready.wait()
        with connections["default"].cursor() as cursor:
            while self.worker.is_alive():
                cursor.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [self.pid]
                )
                if cursor.fetchone()[0]:
                    return
                self.worker.join(0.01)

    def finish(self):
        # Not a timing assertion: a hang must fail the test, not the suite.
        self.worker.join(60)
        assert not self.worker.is_alive()
        return self.outcome


def finished_cleanly(*works: Elsewhere) -> list:
    """The outcomes of `works` once each has finished, none with an error (a deadlock victim,
    a lock timeout), and every deferred foreign key still met."""
    outcomes = [work.finish() for work in works]
    for outcome in outcomes:
        assert "error" not in outcome, outcome
    connection.check_constraints()
    return outcomes


class ForkDuringRetentionTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Forks and retention")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.messages = append(
            self.thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(8)]
        )
        end = self.messages[5]
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="- earlier turns", summary_upto_id=end.pk, summary_upto_depth=end.depth
        )
        with transaction.atomic():
            _summary_held_mark(thread_id=self.thread.pk, scope="", upto_id=end.pk, extends=False)
        self.held = {m.pk for m in self.messages[:5]}
        assert set(SummarizedMessage.objects.values_list("message_id", flat=True)) == self.held
        Message.objects.filter(thread=self.thread).update(created_at=timezone.now() - timedelta(days=40))
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.MESSAGES, max_age_days=30)
        self.fork = self.messages[2]
        self.run = RetentionRun.objects.create(workspace=self.workspace, trigger="test")

    def retain(self) -> int:
        """One pass of the messages rule, as a run applies it."""
        (rule,) = [r for r in retention_rules_effective(workspace=self.workspace) if r.tier == Tier.MESSAGES]
        return _apply_rule(rule=rule, run=self.run, now=timezone.now())

    def edit(self):
        edited = {"role": "user", "content": "Turn 3, edited.", "parent": str(self.fork.pk)}
        return append(self.thread, edited)

    def _after_marks_deleted(self, during):
        """Patch mark deletions so that `during` runs right after the first one this thread
        makes, before its transaction commits."""
        raw_delete = QuerySet._raw_delete
        main, fired = threading.current_thread(), []

        def marks_deleted(queryset, using):
            count = raw_delete(queryset, using)
            if queryset.model is SummarizedMessage and threading.current_thread() is main and not fired:
                fired.append(True)
                during()
            return count

        return fired, mock.patch.object(QuerySet, "_raw_delete", marks_deleted)

    def test_an_append_in_progress_keeps_retention_off_its_thread(self):
        """The append has cleared the marks at and above its fork, not committed yet; the
        batch neither waits for it nor deletes what the new branch reads."""
        retention = Elsewhere(self.retain)
        fired, patched = self._after_marks_deleted(retention.start)
        with patched:
            (edited,) = self.edit()
        assert fired == [True]
        outcome = retention.finish()
        assert "error" not in outcome, outcome
        assert outcome["value"] == 0
        stored = set(Message.objects.filter(thread=self.thread).values_list("pk", flat=True))
        assert stored == {m.pk for m in self.messages} | {edited.pk}
        # The fork and above are read by both branches now; the next run deletes only what the
        # summary still holds alone.
        assert self.retain() == 2
        stored = set(Message.objects.filter(thread=self.thread).values_list("pk", flat=True))
        summary_only = {self.messages[3].pk, self.messages[4].pk}
        assert stored == {m.pk for m in self.messages} - summary_only | {edited.pk}

    def test_a_batch_in_progress_deletes_the_fork_and_the_append_is_told(self):
        """The batch holds the marked messages and is deleting them; the append that forks
        from one waits for it, then answers PARENT_UNKNOWN (a 400), not a foreign-key error
        at commit, and every message no summary held stays."""
        editing = Elsewhere(self.edit)
        fired, patched = self._after_marks_deleted(editing.start)
        with patched:
            deleted = self.retain()
        assert fired == [True]
        outcome = editing.finish()
        assert deleted == len(self.held)
        error = outcome.get("error")
        assert isinstance(error, ApplicationError), outcome
        assert error.status_code == 400
        assert error.fields == {"messages[0].parent": [PARENT_UNKNOWN]}
        stored = set(Message.objects.filter(thread=self.thread).values_list("pk", flat=True))
        assert stored == {m.pk for m in self.messages} - self.held
