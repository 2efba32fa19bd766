"""Task delivery survives killed workers (issue 11, finding 5): the configuration that makes it so."""

from django.conf import settings
from django.test import SimpleTestCase

from memory_project.celery import app

# Tasks that are not idempotent, each with the reason, opt out of late acknowledgement.
NOT_IDEMPOTENT = {"episodes.tasks.entry_extract_task"}  # pays an LLM call per run


class CeleryDeliveryConfigTests(SimpleTestCase):
    def project_tasks(self):
        app.loader.import_default_modules()
        return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}

    def test_every_idempotent_task_is_acknowledged_late_and_requeued_when_its_process_dies(self):
        tasks = self.project_tasks()
        assert "facts.tasks.fact_embed_task" in tasks
        for name, task in tasks.items():
            if name in NOT_IDEMPOTENT:
                assert not task.acks_late, name
            else:
                assert task.acks_late and task.reject_on_worker_lost, name

    def test_visibility_timeout_exceeds_the_longest_a_worker_holds_a_message(self):
        """Longer than a retry countdown plus the hard time limit, or a slow task runs twice."""
        longest_countdown = max(
            getattr(task, "retry_backoff_max", 0) if getattr(task, "retry_backoff", False) else 0
            for task in self.project_tasks().values()
        )
        timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
        assert timeout > longest_countdown + settings.CELERY_TASK_TIME_LIMIT
        assert app.conf.worker_prefetch_multiplier == 1

    def test_embedding_and_compaction_tasks_retry_while_the_database_is_unavailable(self):
        """A PostgreSQL restart does not fail (and so acknowledge) them: they retry."""
        from django.db import InterfaceError, OperationalError

        tasks = self.project_tasks()
        for name in (
            "facts.tasks.fact_embed_task",
            "procedures.tasks.procedure_embed_task",
            "episodes.tasks.entry_embed_task",
            "episodes.tasks.message_embed_task",
            "threads.tasks.thread_compact_task",
        ):
            retried = tasks[name].autoretry_for
            assert OperationalError in retried and InterfaceError in retried, name

    def test_every_retried_task_keeps_the_retry_limit_it_declares(self):
        """A wildcard CELERY_TASK_ANNOTATIONS max_retries replaced every task's own: the
        embedding and compaction tasks declared 6 and got 5, and the compaction's count of
        retries left was wrong. Each retried task declares its limit, and that one holds."""
        from core.tasks import EMBED_RETRY

        tasks = self.project_tasks()
        declared = {
            "facts.tasks.fact_embed_task": EMBED_RETRY["max_retries"],
            "threads.tasks.thread_compact_task": 6,
            "procedures.tasks.procedures_learn_task": 6,
            "core.tasks.vector_graph_extend_task": 6,
            "retention.tasks.retention_run_task": 5,
            "webhooks.tasks.webhook_deliver_task": 5,
        }
        for name, limit in declared.items():
            assert tasks[name].max_retries == limit, name
        for name, task in tasks.items():
            if getattr(task, "autoretry_for", ()):
                assert task.max_retries is not None, f"{name} would retry for ever"

    def test_the_sweep_repairs_every_tier_periodically(self):
        entries = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
        assert "runtime.tasks.embeddings_sweep_task" in entries

    def test_beat_sends_only_under_the_database_lock(self):
        """Two beats on one database (two hosts running serve) never both send."""
        from celery.utils.imports import symbol_by_name

        from core.lib.beat import LockedPersistentScheduler

        assert symbol_by_name(app.conf.beat_scheduler) is LockedPersistentScheduler

    def test_every_route_names_a_registered_task_and_a_queue_workers_consume(self):
        """A route keyed by a name no task has (a module path instead of a kept name) would
        silently leave that task on the default queue; a queue no worker consumes by default
        would leave its tasks in the broker."""
        tasks = self.project_tasks()
        consumed = {queue.name for queue in app.conf.task_queues}
        for name, route in settings.CELERY_TASK_ROUTES.items():
            assert name in tasks, name
            assert route["queue"] in consumed, name
        assert app.conf.task_default_queue in consumed
        embedding_tasks = {name for name in tasks if name.endswith("_embed_task")}
        assert embedding_tasks <= {
            n for n, r in settings.CELERY_TASK_ROUTES.items() if r["queue"] == "embeddings"
        }
