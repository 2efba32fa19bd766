"""Fair queueing of LLM-bound work per workspace.

A Celery queue is first in, first out: a workspace that queues 500 reflection steps puts
every other workspace's work behind them. Work queued here (`llm_job_enqueue`) waits in
`core_llmjob` instead, and `llm_jobs_dispatch` hands it to the broker in turns: each pass
sends at most one job per workspace, least recently served workspace first, and never more
than LLM_JOBS_PER_WORKSPACE of one workspace's jobs are in the broker or running at once.
The cap is checked and the job claimed under a per-workspace advisory lock, so two
dispatchers never both send past it.

A job's task receives `llm_job_id` and calls `llm_job_finish` when it ends (in `finally`),
which frees the slot and dispatches again. A job sent and not finished within
LLM_JOB_LOST_SECONDS (a worker killed mid-task) goes back to the queue (`llm_jobs_recover`,
from beat), so its task must be idempotent.
"""

import logging
import threading
import zlib
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.module_loading import import_string

from core.models import LLMJob

logger = logging.getLogger(__name__)

# Finished jobs are kept this long (what /admin shows of recent work), then purged.
DONE_RETENTION = timedelta(days=1)
_LOCK_NAMESPACE = 0x4C4C4D  # "LLM": keeps these advisory locks apart from others' keys.
_local = threading.local()


def llm_job_enqueue(*, workspace_id, task: str, kwargs: dict) -> LLMJob:
    """Queue `task(**kwargs, llm_job_id=...)` for `workspace_id`'s turn; dispatched after commit."""
    job = LLMJob.objects.create(workspace_id=workspace_id, task=task, kwargs=kwargs)
    transaction.on_commit(llm_jobs_dispatch)
    return job


def _workspace_lock(workspace_id) -> None:
    key = zlib.crc32(str(workspace_id).encode())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, key - (1 << 31)])


def _claim(workspace_id, now) -> LLMJob | None:
    """The workspace's oldest queued job, marked sent, if it is under its cap."""
    with transaction.atomic():
        _workspace_lock(workspace_id)
        in_flight = LLMJob.objects.filter(workspace_id=workspace_id, state=LLMJob.State.SENT).count()
        if in_flight >= settings.LLM_JOBS_PER_WORKSPACE:
            return None
        job = (
            LLMJob.objects.select_for_update(skip_locked=True)
            .filter(workspace_id=workspace_id, state=LLMJob.State.QUEUED)
            .order_by("created_at", "id")
            .first()
        )
        if job is None:
            return None
        job.state, job.sent_at = LLMJob.State.SENT, now
        job.save(update_fields=["state", "sent_at"])
    return job


def _turn_order() -> list:
    """Workspaces with queued jobs, least recently served first (then by their oldest job)."""
    waiting = {
        row["workspace_id"]: row["oldest"]
        for row in LLMJob.objects.filter(state=LLMJob.State.QUEUED)
        .values("workspace_id")
        .annotate(oldest=Min("created_at"))
    }
    served = {
        row["workspace_id"]: row["last"]
        for row in LLMJob.objects.filter(workspace_id__in=waiting, sent_at__isnull=False)
        .values("workspace_id")
        .annotate(last=Max("sent_at"))
    }
    return sorted(
        waiting, key=lambda ws: (served.get(ws) is not None, served.get(ws) or waiting[ws], waiting[ws])
    )


def _send(job: LLMJob) -> None:
    task = current_app.tasks.get(job.task)
    if task is None:
        # A process that has not imported the task's module yet (the app's autodiscovery is
        # lazy): a task registered under its module path imports by it.
        try:
            task = import_string(job.task)
        except ImportError:
            task = None
    if task is None:
        logger.error("fair queue: job %s names unknown task %s; dropped", job.pk, job.task)
        llm_job_finish(job.pk)
        return
    # apply_async (not send_task) so eager test settings run the task inline.
    task.apply_async(kwargs={**job.kwargs, "llm_job_id": job.pk})


def llm_jobs_dispatch() -> int:
    """Send queued jobs in turns until every waiting workspace is at its cap; returns how many.

    Re-entrant calls (a job finishing inline under eager settings) only ask the running
    dispatch for another pass, so turns stay in order instead of nesting.
    """
    if getattr(_local, "active", False):
        _local.again = True
        return 0
    _local.active, sent = True, 0
    try:
        while True:
            _local.again = False
            sent_this_pass = 0
            for workspace_id in _turn_order():
                job = _claim(workspace_id, timezone.now())
                if job is not None:
                    sent_this_pass += 1
                    _send(job)
            sent += sent_this_pass
            if not sent_this_pass and not _local.again:
                return sent
    finally:
        _local.active = False


def llm_job_finish(job_id) -> None:
    """Mark the job done (idempotent) and give the next job its turn."""
    if job_id is None:
        return
    LLMJob.objects.filter(pk=job_id).exclude(state=LLMJob.State.DONE).update(
        state=LLMJob.State.DONE, finished_at=timezone.now()
    )
    transaction.on_commit(llm_jobs_dispatch)


def llm_jobs_recover(*, now=None) -> dict:
    """Requeue jobs lost with their worker, purge old finished ones, dispatch; from beat."""
    now = now or timezone.now()
    lost = LLMJob.objects.filter(
        state=LLMJob.State.SENT, sent_at__lt=now - timedelta(seconds=settings.LLM_JOB_LOST_SECONDS)
    ).update(state=LLMJob.State.QUEUED, sent_at=None)
    purged, _ = LLMJob.objects.filter(state=LLMJob.State.DONE, finished_at__lt=now - DONE_RETENTION).delete()
    return {"requeued": lost, "purged": purged, "sent": llm_jobs_dispatch()}
