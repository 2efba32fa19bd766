"""Thread deletion: one thread, and a batch by id. Idle threads past an agent's `retention_days`
go through the retention engine (retention.services)."""

from django.db import transaction

from core.access import Principal, references_resolve, require_write
from core.errors import NotFoundError
from core.models import Workspace
from core.services import audit_record
from threads.models import Thread


def _threads_delete(queryset) -> dict:
    """Delete threads with everything under them; returns counts by kind."""
    _total, by_model = queryset.delete()
    return {
        "threads": by_model.get("threads.Thread", 0),
        "messages": by_model.get("threads.Message", 0),
        "checkpoints": by_model.get("checkpoints.Checkpoint", 0),
    }


def thread_delete(*, thread: Thread, actor: str = "system") -> dict:
    with transaction.atomic():
        # Locked before its rows are collected, as appends and compactions lock it: a
        # compaction waits, then finds no thread, instead of marking messages being deleted.
        Thread.objects.select_for_update().filter(pk=thread.pk).values_list("pk").first()
        counts = _threads_delete(Thread.objects.filter(pk=thread.pk))
        audit_record(
            workspace=thread.workspace,
            actor=actor,
            action="delete",
            entity_type="thread",
            entity_id=thread.pk,
            changes=counts,
        )
    return counts


def threads_delete(*, ids, actor: str) -> dict:
    """Delete threads by id with everything under them, auditing each; no scoping here."""
    with transaction.atomic():
        # In key order, as every other writer locks several threads (a fact write's sources,
        # the vector jobs, an erasure); the model's ordering (newest first) crossed them.
        locked = Thread.objects.filter(pk__in=ids).order_by("pk").select_for_update()
        rows = list(locked.values_list("pk", "workspace_id"))
        counts = _threads_delete(Thread.objects.filter(pk__in=[pk for pk, _ in rows]))
        for pk, workspace_id in rows:
            audit_record(
                workspace=Workspace(pk=workspace_id),
                actor=actor,
                action="delete",
                entity_type="thread",
                entity_id=pk,
                changes={"batch": True},
            )
    return counts


def thread_batch_delete(*, principal: Principal, ids) -> dict:
    """Delete the threads `ids`, all or nothing: one id outside the caller's scope is a 404."""
    require_write(principal)
    with transaction.atomic():
        found = references_resolve(
            Thread.objects.only("pk"),
            principal,
            ids,
            not_found=NotFoundError("Some threads were not found; nothing was deleted."),
        )
        counts = threads_delete(ids=[t.pk for t in found], actor=principal.actor)
    return {"deleted": counts["threads"], **counts}
