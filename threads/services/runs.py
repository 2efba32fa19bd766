"""Run bookkeeping: the latest snapshot of each run and the log of task attempts."""

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.errors import ApplicationError
from threads.models import IterationLog, RunSnapshot, Thread

RUN_ID_INVALID = "A run id is 1 to 200 characters."


def run_snapshot_put(*, thread: Thread, run_id: str, snapshot) -> tuple[RunSnapshot, bool]:
    """Keep the latest snapshot of a run (an upsert); returns (snapshot, created)."""
    if not run_id or len(run_id) > 200:
        raise ApplicationError(RUN_ID_INVALID, fields={"run_id": [RUN_ID_INVALID]})
    if not isinstance(snapshot, (dict, list)):
        raise ApplicationError(
            "The snapshot must be a JSON object or list.", fields={"snapshot": ["Invalid."]}
        )
    now = timezone.now()
    obj, created = RunSnapshot.objects.update_or_create(
        thread=thread,
        run_id=run_id,
        defaults={"snapshot": snapshot, "updated_at": now, "workspace_id": thread.workspace_id},
        create_defaults={
            "snapshot": snapshot,
            "updated_at": now,
            "created_at": now,
            "workspace_id": thread.workspace_id,
        },
    )
    return obj, created


def iteration_log_append(
    *,
    thread: Thread,
    task_key: str,
    outcome: str,
    error: str = "",
    attempt: int | None = None,
    detail=None,
    at=None,
) -> IterationLog:
    """Record one attempt; `attempt` defaults to the task's previous attempt + 1."""
    if outcome not in IterationLog.Outcome.values:
        message = "Outcome must be one of: " + ", ".join(IterationLog.Outcome.values) + "."
        raise ApplicationError(message, fields={"outcome": [message]})
    with transaction.atomic():
        Thread.objects.select_for_update().only("id").get(pk=thread.pk)
        if attempt is None:
            previous = IterationLog.objects.filter(thread=thread, task_key=task_key).aggregate(
                a=Max("attempt")
            )
            attempt = (previous["a"] or 0) + 1
        log = IterationLog(
            workspace_id=thread.workspace_id,
            thread=thread,
            task_key=task_key,
            attempt=attempt,
            outcome=outcome,
            error=error or "",
            detail=detail or {},
            at=at or timezone.now(),
        )
        log.full_clean(exclude=["workspace", "thread"])
        log.save()
    return log
