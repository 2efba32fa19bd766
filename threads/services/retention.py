"""Thread deletion: one thread, a batch by id, and the retention purge of idle threads."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.access import Principal, references_resolve, require_write
from core.errors import NotFoundError
from core.memory_settings import memory_settings_for
from core.models import Agent, Workspace
from core.services import audit_record, audit_record_deletes
from threads.models import Thread

# The actor of deletions made by the retention policy in the audit trail.
RETENTION_ACTOR = "system:retention"


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
        rows = list(Thread.objects.filter(pk__in=ids).select_for_update().values_list("pk", "workspace_id"))
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


def threads_purge_expired(*, now=None) -> int:
    """Delete threads idle longer than their agent's `retention_days`, in batches."""
    now = now or timezone.now()
    batch = settings.THREADS_RETENTION_BATCH
    deleted = 0
    for agent in Agent.objects.only("id", "memory_settings", "workspace_id").iterator():
        days = memory_settings_for(agent).retention_days
        if days <= 0:
            continue
        cutoff = now - timedelta(days=days)
        while True:
            ids = list(
                Thread.objects.filter(agent=agent, last_activity_at__lt=cutoff)
                .exclude(memory_user__legal_hold_at__isnull=False)
                .values_list("pk", flat=True)[:batch]
            )
            if not ids:
                break
            with transaction.atomic():
                # Another purge (a second worker) may be deleting the same rows: each takes
                # the ones it can lock, so every thread is deleted and audited once.
                ids = list(
                    Thread.objects.filter(pk__in=ids)
                    .select_for_update(skip_locked=True)
                    .values_list("pk", flat=True)
                )
                if not ids:
                    break  # the other purge holds them all and goes on to the rest
                deleted += _threads_delete(Thread.objects.filter(pk__in=ids))["threads"]
                audit_record_deletes(
                    workspace=Workspace(pk=agent.workspace_id),
                    actor=RETENTION_ACTOR,
                    entity_type="thread",
                    ids=ids,
                )
    return deleted
