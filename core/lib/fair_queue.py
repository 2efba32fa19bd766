"""Fair queueing of LLM-bound work per workspace.

A Celery queue is first in, first out: a workspace that queues 500 reflection steps puts
every other workspace's work behind them. Work queued here (`llm_job_enqueue`) waits in
`core_llmjob` instead, and `llm_jobs_dispatch` hands it to the broker in turns: each pass
sends at most one job per workspace, least recently served workspace first, and never more
than LLM_JOBS_PER_WORKSPACE of one workspace's jobs are in the broker or running at once.
The cap is checked and the job claimed under a per-workspace advisory lock, so two
dispatchers never both send past it.

A job's task receives `llm_job_id`, skips the run when the job is not in the sent state
(`llm_job_begin`: a redelivered message of a job already done or deferred), and calls
`llm_job_finish` when it ends (in `finally`), which frees the slot and dispatches again. A job
sent and not finished within LLM_JOB_LOST_SECONDS (a worker killed mid-task) goes back to the
queue (`llm_jobs_recover`, from beat), so its task must be idempotent.

Work refused under a `wait` budget is deferred, not degraded: `llm_job_defer` puts the job
back in the queue with a not-before time (the next budget day); it is dispatched once that
time has passed, by any later dispatch or by the beat's `llm_jobs_recover`, which also
releases deferrals early when the workspace's budget was raised or its policy changed.
Requests of the same work share one queued job (`dedupe_key`, a partial unique constraint):
a thread's compaction is queued once however many appends ask for it.
"""

import logging
import threading
import zlib
from datetime import timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Min, Q
from django.utils import timezone
from django.utils.module_loading import import_string
from kombu.exceptions import OperationalError as BrokerUnavailable

from core.models import LLMJob

logger = logging.getLogger(__name__)

# Finished jobs are kept this long (what /admin shows of recent work), then purged.
DONE_RETENTION = timedelta(days=1)
_LOCK_NAMESPACE = 0x4C4C4D  # "LLM": keeps these advisory locks apart from others' keys.
_local = threading.local()
# How often a deduplicated job's insert (or its return to the queue) is tried. A failure means
# another request's job of the same key was queued first and then sent before it could be read
# back; three in a row would take that race three times over.
_ENQUEUE_ATTEMPTS = 3


def llm_job_enqueue(
    *, workspace_id, task: str, kwargs: dict, dedupe_key: str = "", not_before=None
) -> LLMJob:
    """Queue `task(**kwargs, llm_job_id=...)` for `workspace_id`'s turn; dispatched after commit
    (not before `not_before`). With `dedupe_key`, a queued job of the same key is returned
    instead of a second one."""
    fields = {"workspace_id": workspace_id, "task": task, "kwargs": kwargs, "not_before": not_before}
    if not dedupe_key:
        job = LLMJob.objects.create(**fields)
        transaction.on_commit(partial(_dispatch_if_room, workspace_id))
        return job
    queued = LLMJob.objects.filter(dedupe_key=dedupe_key, state=LLMJob.State.QUEUED)
    for attempt in range(_ENQUEUE_ATTEMPTS):
        existing = queued.first()
        if existing is not None:
            return existing
        try:
            # A savepoint: a concurrent request of the same key must not break the caller's
            # transaction.
            with transaction.atomic():
                job = LLMJob.objects.create(dedupe_key=dedupe_key, **fields)
        except IntegrityError:
            # A concurrent request's job of the same key was inserted first. It is read back
            # above; if it was sent meanwhile (no longer queued), this request queues its own.
            if attempt == _ENQUEUE_ATTEMPTS - 1:
                raise
            continue
        break
    transaction.on_commit(partial(_dispatch_if_room, workspace_id))
    return job


def _dispatch_if_room(workspace_id) -> None:
    """Dispatch after an enqueue, unless the workspace is at its cap: then the finish of one
    of its running jobs dispatches (after its own commit, so one of the two sees the other),
    and a busy workspace's request pays one count instead of a pass over every queue."""
    in_flight = LLMJob.objects.filter(workspace_id=workspace_id, state=LLMJob.State.SENT).count()
    if in_flight < settings.LLM_JOBS_PER_WORKSPACE:
        llm_jobs_dispatch()


def _due(now) -> Q:
    return Q(not_before__isnull=True) | Q(not_before__lte=now)


def _workspace_lock(workspace_id) -> None:
    key = zlib.crc32(str(workspace_id).encode())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, key - (1 << 31)])


def _claim(workspace_id, now, full: set) -> LLMJob | None:
    """The workspace's oldest due queued job, marked sent, if it is under its cap. Adds the
    workspace to `full` when no further job of it can be sent now."""
    with transaction.atomic():
        _workspace_lock(workspace_id)
        in_flight = LLMJob.objects.filter(workspace_id=workspace_id, state=LLMJob.State.SENT).count()
        if in_flight + 1 >= settings.LLM_JOBS_PER_WORKSPACE:
            full.add(workspace_id)
        if in_flight >= settings.LLM_JOBS_PER_WORKSPACE:
            return None
        job = (
            LLMJob.objects.select_for_update(skip_locked=True)
            .filter(_due(now), workspace_id=workspace_id, state=LLMJob.State.QUEUED)
            .order_by("created_at", "id")
            .first()
        )
        if job is None:
            full.add(workspace_id)
            return None
        job.state, job.sent_at = LLMJob.State.SENT, now
        job.save(update_fields=["state", "sent_at"])
    return job


def _turn_order(now) -> list:
    """Workspaces with due queued jobs, least recently served first (then by their oldest job)."""
    waiting = {
        row["workspace_id"]: row["oldest"]
        for row in LLMJob.objects.filter(_due(now), state=LLMJob.State.QUEUED)
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


def _send(job: LLMJob) -> bool:
    """Hand `job` to the broker; False when the broker cannot be reached. The job then goes
    back to the queue for the next dispatch (a later request or finish, or beat's
    `llm_jobs_recover`), instead of the request that dispatched after its commit failing with
    its rows committed, or the job waiting LLM_JOB_LOST_SECONDS as a lost one."""
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
        return True
    try:
        # apply_async (not send_task) so eager test settings run the task inline.
        task.apply_async(kwargs={**job.kwargs, "llm_job_id": job.pk})
    except BrokerUnavailable as exc:
        logger.warning("fair queue: the broker did not take job %s (%s); it is queued again", job.pk, exc)
        _requeue(job.pk, now=timezone.now())
        return False
    return True


def _requeue(job_id, *, now) -> int:
    """A sent job back in the queue (1), or done when the same work is queued again already."""
    try:
        with transaction.atomic():
            return LLMJob.objects.filter(pk=job_id, state=LLMJob.State.SENT).update(
                state=LLMJob.State.QUEUED, sent_at=None
            )
    except IntegrityError:
        # The same work is queued again already; that request carries it.
        LLMJob.objects.filter(pk=job_id).update(state=LLMJob.State.DONE, finished_at=now)
        return 0


def llm_jobs_dispatch() -> int:
    """Send queued jobs in turns until every waiting workspace is at its cap; returns how many.

    Re-entrant calls (a job finishing inline under eager settings) only ask the running
    dispatch for another pass, so turns stay in order instead of nesting. A workspace found
    at its cap (or with nothing due) is not asked again in this call unless a job finished
    meanwhile: with the default cap of one, a request that queues a job pays one pass.
    """
    if getattr(_local, "active", False):
        _local.again = True
        return 0
    _local.active, sent = True, 0
    full: set = set()
    try:
        while True:
            _local.again = False
            served = []
            for workspace_id in _turn_order(timezone.now()):
                if workspace_id in full:
                    continue
                job = _claim(workspace_id, timezone.now(), full)
                if job is not None:
                    if not _send(job):
                        # The broker cannot be reached: nothing more is sent in this call.
                        return sent + len(served)
                    served.append(workspace_id)
            sent += len(served)
            if _local.again:
                full.clear()
            elif all(workspace_id in full for workspace_id in served):
                return sent
    finally:
        _local.active = False


def llm_job_begin(job_id) -> bool:
    """Whether the task holding `job_id` should run: its job is sent (not done, not deferred
    meanwhile). A task started without a job (a message from before the fair queue) runs."""
    if job_id is None:
        return True
    return LLMJob.objects.filter(pk=job_id, state=LLMJob.State.SENT).exists()


def llm_job_keep(job_id) -> None:
    """The job stays sent while its task waits for a Celery retry: its slot stays taken and the
    lost-job clock restarts."""
    if job_id is not None:
        LLMJob.objects.filter(pk=job_id, state=LLMJob.State.SENT).update(sent_at=timezone.now())


def llm_job_defer(
    job_id, *, not_before, workspace_id, task: str, kwargs: dict, dedupe_key: str = ""
) -> LLMJob:
    """Put the job back in the queue, not to be dispatched before `not_before`, and give the
    workspace's next job its turn. Without a job (a task sent before the fair queue), a new
    deferred job of `task(**kwargs)` is queued. The caller does not finish the job."""
    job = LLMJob.objects.filter(pk=job_id).first() if job_id is not None else None
    if job is None:
        return llm_job_enqueue(
            workspace_id=workspace_id, task=task, kwargs=kwargs, dedupe_key=dedupe_key, not_before=not_before
        )
    transaction.on_commit(llm_jobs_dispatch)
    if job.state == LLMJob.State.DONE:
        return job
    for attempt in range(_ENQUEUE_ATTEMPTS):
        try:
            with transaction.atomic():
                LLMJob.objects.filter(pk=job.pk).update(
                    state=LLMJob.State.QUEUED, sent_at=None, not_before=not_before
                )
        except IntegrityError:
            # The same work was requested again while this job ran: the queued request carries
            # it, unless it was sent meanwhile (no longer queued): then this job queues again.
            twin = LLMJob.objects.filter(dedupe_key=job.dedupe_key, state=LLMJob.State.QUEUED).first()
            if twin is None and attempt < _ENQUEUE_ATTEMPTS - 1:
                continue
            if twin is None:
                raise
            LLMJob.objects.filter(pk=job.pk).update(state=LLMJob.State.DONE, finished_at=timezone.now())
            if twin.not_before is None or twin.not_before < not_before:
                LLMJob.objects.filter(pk=twin.pk).update(not_before=not_before)
            return twin
        break
    job.refresh_from_db()
    return job


def _deferrals_release(now) -> int:
    """Deferred jobs of workspaces that may spend again (budget raised, day reset, policy
    changed to fallback) become due now."""
    from core.lib.llm_budget import POLICY_WAIT, llm_budget_state
    from core.models import Workspace

    deferred = LLMJob.objects.filter(state=LLMJob.State.QUEUED, not_before__gt=now)
    released = 0
    for workspace in Workspace.objects.filter(pk__in=deferred.values("workspace_id")):
        budget = llm_budget_state(workspace=workspace, now=now)
        if not budget.exhausted or budget.policy != POLICY_WAIT:
            released += deferred.filter(workspace=workspace).update(not_before=now)
    return released


def llm_job_finish(job_id) -> None:
    """Mark the job done (idempotent) and give the next job its turn."""
    if job_id is None:
        return
    LLMJob.objects.filter(pk=job_id).exclude(state=LLMJob.State.DONE).update(
        state=LLMJob.State.DONE, finished_at=timezone.now()
    )
    transaction.on_commit(llm_jobs_dispatch)


def llm_jobs_recover(*, now=None) -> dict:
    """Requeue jobs lost with their worker, release deferrals that need not wait any longer,
    purge old finished jobs, dispatch (deferred jobs that came due included); from beat."""
    now = now or timezone.now()
    lost = 0
    for job in LLMJob.objects.filter(
        state=LLMJob.State.SENT, sent_at__lt=now - timedelta(seconds=settings.LLM_JOB_LOST_SECONDS)
    ).only("pk"):
        lost += _requeue(job.pk, now=now)
    released = _deferrals_release(now)
    purged, _ = LLMJob.objects.filter(state=LLMJob.State.DONE, finished_at__lt=now - DONE_RETENTION).delete()
    return {"requeued": lost, "released": released, "purged": purged, "sent": llm_jobs_dispatch()}
