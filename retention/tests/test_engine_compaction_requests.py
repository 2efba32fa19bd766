"""Retention asks for a compaction of a thread whose expired messages no summary holds only when
a compaction could hold more of them: not again after one that ran since the thread's last
message (a fork's shared turns and an abandoned branch stay waiting for good), again once new
messages arrive (whatever the clocks of the appending host and the worker), and again when a
request was lost."""

from datetime import timedelta
from unittest import mock

from django.test import override_settings
from django.utils import timezone

from core.models import LLMJob
from core.services import agent_update
from core.testing import MemoryTestCase
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, Tier
from retention.selectors import retention_preview
from retention.services import retention_run
from threads.models import Message, NodeSummary, Thread
from threads.services import thread_compact
from threads.tasks import thread_compact_task
from threads.tests.factories import append, make_thread

OLD = timezone.now() - timedelta(days=40)
_real_now = timezone.now


def clock_behind():
    """A web host whose clock runs ten minutes behind the worker's."""
    return mock.patch("django.utils.timezone.now", lambda: _real_now() - timedelta(minutes=10))


def turns(label, count):
    return [("user" if i % 2 == 0 else "assistant", f"{label} turn {i}, invoice {i}.") for i in range(count)]


class CompactionRequestTests(MemoryTestCase):
    def setUp(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 4})
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.MESSAGES, max_age_days=30)

    def thread(self):
        return make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)

    def compactions(self, thread) -> int:
        """Compactions of `thread` queued so far (each one a fair-queue job, run on commit)."""
        return LLMJob.objects.filter(task=thread_compact_task.name, kwargs__thread_id=str(thread.pk)).count()

    def retain(self):
        """One retention run, with what it queues on commit run too (eager Celery)."""
        with self.captureOnCommitCallbacks(execute=True):
            return retention_run(workspace=self.workspace)

    def forked_thread(self):
        """A compacted thread whose newest branch forks from an early turn: the turns before
        the fork are read by both branches, the old branch is abandoned, so no summary ever
        holds them alone."""
        thread = self.thread()
        first = append(thread, *turns("First", 12))
        assert thread_compact(thread_id=thread.pk) == "compacted"
        append(thread, *turns("Edited", 8), parent=str(first[1].pk))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        return thread

    def test_a_fork_that_stays_waiting_is_asked_about_once(self):
        """Two runs over a thread whose waiting messages no compaction can hold: one
        compaction, not one per run; both runs keep those messages."""
        thread = self.forked_thread()
        self.retain()
        assert self.compactions(thread) == 1
        waiting = retention_preview(workspace=self.workspace)["messages_waiting_for_summary"]
        assert waiting > 0
        count = Message.objects.filter(thread=thread).count()

        self.retain()
        self.retain()

        assert self.compactions(thread) == 1
        assert Message.objects.filter(thread=thread).count() == count
        assert retention_preview(workspace=self.workspace)["messages_waiting_for_summary"] == waiting

    def test_a_thread_no_compaction_summarizes_is_asked_about_once(self):
        """Expired turns the recent window still shows: the compaction answers up to date, and
        the next run does not ask again."""
        thread = self.thread()
        append(thread, *turns("Short", 3))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        self.retain()
        assert self.compactions(thread) == 1
        thread.refresh_from_db()
        assert thread.compacted_at is None and thread.compaction_requested_at is None

    def test_new_messages_are_asked_about_again(self):
        """A message appended after the last compaction: the next run asks again, and that
        compaction lets the run after it delete what its summary holds."""
        thread = self.forked_thread()
        self.retain()
        self.retain()
        assert self.compactions(thread) == 1
        before = Message.objects.filter(thread=thread).count()

        append(thread, *turns("Later", 10))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        assert self.compactions(thread) == 2
        self.retain()
        assert Message.objects.filter(thread=thread).count() < before + 10

    def test_a_lost_request_is_asked_again(self):
        """A request older than the compaction's request lifetime that never finished (its
        worker lost, its compaction failed) does not keep the thread out for good."""
        thread = self.thread()
        append(thread, *turns("Short", 3))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        Thread.objects.filter(pk=thread.pk).update(compaction_requested_at=OLD)
        self.retain()
        assert self.compactions(thread) == 1

    def test_a_nodes_expired_messages_get_that_nodes_compaction(self):
        """A sub-agent's messages are held by its node's summary, never the thread's: the run
        asks for the node's compaction (once), and the run after it deletes what it holds."""
        thread = self.thread()
        (ask,) = append(thread, ("user", "Research Paris hotels for 12 March."))
        append(
            thread,
            {"role": "assistant", "content": "Looking at hotels near the Louvre.", "parent": str(ask.pk)},
            *turns("Researcher", 11),
            node_id="researcher",
        )
        Message.objects.filter(thread=thread).update(created_at=OLD)
        node_messages = Message.objects.filter(thread=thread, node_id="researcher")
        count = node_messages.count()

        self.retain()
        node_jobs = LLMJob.objects.filter(task=thread_compact_task.name, kwargs__node="researcher")
        assert node_jobs.count() == 1
        self.retain()

        assert node_jobs.count() == 1
        assert 0 < node_messages.count() < count

    def forget_finished_jobs(self):
        """What the fair queue does a day after a compaction finished: its job is gone."""
        LLMJob.objects.filter(task=thread_compact_task.name, state=LLMJob.State.DONE).delete()

    def node_asked_once(self):
        """A thread whose "researcher" node has old messages, asked to compact once; its jobs."""
        thread = self.thread()
        (ask,) = append(thread, ("user", "Research Paris hotels for 12 March."))
        append(
            thread,
            {"role": "assistant", "content": "Looking at hotels near the Louvre.", "parent": str(ask.pk)},
            ("assistant", "Two hotels found."),
            node_id="researcher",
        )
        Message.objects.filter(thread=thread).update(created_at=OLD)
        node_jobs = LLMJob.objects.filter(task=thread_compact_task.name, kwargs__node="researcher")
        self.retain()
        assert node_jobs.count() == 1
        self.forget_finished_jobs()
        return thread, node_jobs

    def test_an_up_to_date_answer_outlives_its_finished_job(self):
        """A compaction that found nothing to fold counts as the thread considered then: once
        its finished job is gone, the run still does not ask again until a message arrives."""
        thread = self.thread()
        append(thread, *turns("Short", 3))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        assert self.compactions(thread) == 1
        self.forget_finished_jobs()

        self.retain()
        assert self.compactions(thread) == 0
        thread.refresh_from_db()
        assert thread.compacted_at is None and thread.compaction_checked_at is not None

        append(thread, ("user", "One more turn, invoice 9."))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        assert self.compactions(thread) == 1

    def test_an_append_from_a_host_whose_clock_runs_behind_is_asked_about_again(self):
        """Appends stamp `last_activity_at` with the web host's clock, compactions run on a
        worker: an append stamped ten minutes "before" the last compaction still makes the
        next run ask again."""
        thread = self.thread()
        append(thread, *turns("Short", 3))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        assert self.compactions(thread) == 1
        self.forget_finished_jobs()

        with clock_behind():
            append(thread, *turns("Later", 10))
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        assert self.compactions(thread) == 1

    def test_a_nodes_append_from_a_host_whose_clock_runs_behind_is_asked_about_again(self):
        """The same for a node's summary, compared with its thread's last activity."""
        thread, node_jobs = self.node_asked_once()

        with clock_behind():
            append(thread, *turns("Researcher", 10), node_id="researcher")
        Message.objects.filter(thread=thread).update(created_at=OLD)
        self.retain()
        assert node_jobs.count() == 1

    def test_a_nodes_up_to_date_answer_outlives_its_finished_job(self):
        """The same for a node's summary: its up-to-date answer is recorded on its NodeSummary."""
        thread, node_jobs = self.node_asked_once()

        self.retain()
        self.retain()
        assert node_jobs.count() == 0
        summary = NodeSummary.objects.get(thread=thread, node_id="researcher")
        assert summary.compacted_at is None and summary.compaction_checked_at is not None

    @override_settings(RETENTION_BATCH=1)
    def test_nodes_that_need_nothing_do_not_fill_the_batch(self):
        """Node requests are filtered before the batch limit: a node whose compaction is
        pending does not take the only slot of a node that waits for its first one."""
        thread = self.thread()
        (ask,) = append(thread, ("user", "Research Paris hotels and trains for 12 March."))
        for node in ("alpha", "beta"):
            append(
                thread,
                {"role": "assistant", "content": f"{node} starts.", "parent": str(ask.pk)},
                *turns(node, 3),
                node_id=node,
            )
        Message.objects.filter(thread=thread).update(created_at=OLD)
        NodeSummary.objects.create(
            workspace=self.workspace, thread=thread, node_id="alpha", compaction_requested_at=timezone.now()
        )

        self.retain()

        jobs = LLMJob.objects.filter(task=thread_compact_task.name, kwargs__thread_id=str(thread.pk))
        assert list(jobs.exclude(kwargs__node="").values_list("kwargs__node", flat=True)) == ["beta"]
