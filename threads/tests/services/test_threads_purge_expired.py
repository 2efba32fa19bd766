from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from core.models import AuditEvent
from core.services import agent_update
from core.testing import MemoryTestCase
from threads.models import Message, Thread
from threads.services import threads_purge_expired
from threads.services.retention import RETENTION_ACTOR
from threads.tests.factories import append, make_thread


class RetentionTests(MemoryTestCase):
    def test_off_by_default(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        Thread.objects.filter(pk=thread.pk).update(last_activity_at=timezone.now() - timedelta(days=3650))
        assert threads_purge_expired() == 0
        assert Thread.objects.filter(pk=thread.pk).exists()

    @override_settings(THREADS_RETENTION_BATCH=2)
    def test_deletes_idle_threads_of_agents_with_retention_in_batches(self):
        agent_update(agent=self.agent, memory_settings={"retention_days": 30})
        old = [make_thread(workspace=self.workspace, agent=self.agent) for _ in range(5)]
        for thread in old:
            append(thread, ("user", "hi"), ("assistant", "hello"))
        fresh = make_thread(workspace=self.workspace, agent=self.agent)
        other_agent_old = make_thread(workspace=self.workspace, agent=self.other_agent)
        long_ago = timezone.now() - timedelta(days=31)
        Thread.objects.filter(pk__in=[t.pk for t in old] + [other_agent_old.pk]).update(
            last_activity_at=long_ago
        )

        assert threads_purge_expired() == 5

        assert set(Thread.objects.values_list("pk", flat=True)) == {fresh.pk, other_agent_old.pk}
        assert not Message.objects.filter(thread_id__in=[t.pk for t in old]).exists()

    def test_every_purged_thread_is_audited_as_a_retention_delete(self):
        """Before, the purge deleted without a trace: only explicit deletes were audited."""
        agent_update(agent=self.agent, memory_settings={"retention_days": 30})
        old = [make_thread(workspace=self.workspace, agent=self.agent) for _ in range(3)]
        Thread.objects.filter(pk__in=[t.pk for t in old]).update(
            last_activity_at=timezone.now() - timedelta(days=31)
        )

        assert threads_purge_expired() == 3

        events = AuditEvent.objects.filter(entity_type="thread", action=AuditEvent.Action.DELETE)
        assert {(e.workspace_id, e.actor, e.entity_id) for e in events} == {
            (self.workspace.pk, RETENTION_ACTOR, str(t.pk)) for t in old
        }

    def test_the_periodic_task_is_scheduled(self):
        from django.conf import settings

        tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
        # The retention engine applies the agents' retention_days with every other rule.
        assert "retention.tasks.retention_run_due_task" in tasks
        assert "checkpoints.tasks.checkpoints_prune_task" in tasks
