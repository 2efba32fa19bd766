"""Reads of a thread's plans, run snapshots and iteration logs."""

from core.errors import NotFoundError
from core.lib.rows import ModelRows
from threads.models import IterationLog, RunSnapshot, Thread, ThreadPlan

# Read by every context of a thread: statements built once (docs/speed.md, "Thread calls").
_PLAN = ModelRows(ThreadPlan, only=("plan",))
_ATTEMPT_FIELDS = ("id", "task_key", "attempt", "outcome", "error", "detail", "at")
_ATTEMPTS = ModelRows(IterationLog, only=_ATTEMPT_FIELDS)


def thread_plan_get(*, thread: Thread) -> ThreadPlan:
    plan = ThreadPlan.objects.filter(thread=thread).order_by("-version").first()
    if plan is None:
        raise NotFoundError("This thread has no plan yet.")
    return plan


def thread_plan_current(*, thread: Thread) -> dict | None:
    """The plan of the thread's newest version, or None when it has none."""
    rows = _PLAN.fetch("WHERE thread_id = %s ORDER BY version DESC LIMIT 1", [thread.pk])
    return rows[0].plan if rows else None


def thread_plan_versions(*, thread: Thread):
    return ThreadPlan.objects.filter(thread=thread).order_by("-version")


def run_snapshot_get(*, thread: Thread, run_id: str) -> RunSnapshot:
    snapshot = RunSnapshot.objects.filter(thread=thread, run_id=run_id).first()
    if snapshot is None:
        raise NotFoundError("No snapshot for this run.")
    return snapshot


def iteration_log_list(*, thread: Thread, task_key: str | None = None):
    queryset = IterationLog.objects.filter(thread=thread)
    if task_key:
        queryset = queryset.filter(task_key=task_key)
    return queryset.order_by("at", "id")


def iteration_log_recent(*, thread: Thread, limit: int) -> list[dict]:
    """The thread's newest `limit` attempts, newest first, as the columns a briefing renders."""
    rows = _ATTEMPTS.fetch("WHERE thread_id = %s ORDER BY at DESC, id DESC LIMIT %s", [thread.pk, limit])
    return [{name: getattr(row, name) for name in _ATTEMPT_FIELDS} for row in rows]
