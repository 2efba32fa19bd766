"""Versioned thread plans."""

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.errors import ApplicationError
from threads.models import Thread, ThreadPlan

PLAN_INVALID = "The plan must be a JSON object or list."


def thread_plan_set(*, thread: Thread, plan, actor: str = "system") -> ThreadPlan:
    """Store a new version of the plan; earlier versions are kept."""
    if not isinstance(plan, (dict, list)):
        raise ApplicationError(PLAN_INVALID, fields={"plan": [PLAN_INVALID]})
    with transaction.atomic():
        Thread.objects.select_for_update().only("id").get(pk=thread.pk)
        current = ThreadPlan.objects.filter(thread=thread).aggregate(v=Max("version"))["v"] or 0
        version = ThreadPlan.objects.create(
            workspace_id=thread.workspace_id, thread=thread, version=current + 1, plan=plan, actor=actor
        )
        Thread.objects.filter(pk=thread.pk).update(last_activity_at=timezone.now())
    return version
