"""Audit events -> deliveries: the audit trail read as an outbox, the sweep, the purge."""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.models import AuditEvent
from webhooks.events import AUDIT_ENTITY_TYPES, OBJECT_NAMES, delivery_payload, event_type_for
from webhooks.models import WebhookDelivery, WebhookSubscription

logger = logging.getLogger(__name__)
# Audit events turned into deliveries per dispatch run; a longer backlog is read by the
# next run, which the run enqueues itself.
DISPATCH_BATCH = 1000
# Deliveries a sweep hands to workers per run.
SWEEP_BATCH = 500
# A delivery handed to a worker is not handed again for this long (its task may still be
# queued); a task lost with a worker comes back after it.
DELIVERY_LEASE = timedelta(minutes=5)
_active_cache: dict = {}


def webhook_active_cache_clear() -> None:
    _active_cache.clear()


def _workspace_has_subscribers(workspace_id) -> bool:
    ttl = settings.WEBHOOKS_ACTIVE_CACHE_SECONDS
    now = time.monotonic()
    cached = _active_cache.get(workspace_id)
    if ttl and cached is not None and cached[1] > now:
        return cached[0]
    active = WebhookSubscription.objects.filter(workspace_id=workspace_id, is_active=True).exists()
    _active_cache[workspace_id] = (active, now + ttl)
    return active


def webhooks_audit_listener(workspace_id) -> None:
    """After a commit that wrote audit events: dispatch them when anyone listens."""
    from webhooks.tasks import webhooks_dispatch_task

    if _workspace_has_subscribers(workspace_id):
        webhooks_dispatch_task.delay(str(workspace_id))


def _outbox_horizon() -> int:
    """Every transaction with a smaller id has ended: its audit events are all visible now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        return cursor.fetchone()[0]


def _payload(event: AuditEvent, event_type: str) -> dict:
    return {
        "id": f"evt_{event.pk}",
        "type": event_type,
        "created_at": event.at.isoformat(),
        "workspace": str(event.workspace_id),
        "actor": event.actor,
        "data": {"object": OBJECT_NAMES[event.entity_type], "id": event.entity_id, "changes": event.changes},
    }


def webhooks_dispatch(*, workspace_id) -> dict:
    """Create the deliveries of the workspace's new audit events and hand them to workers.

    Reads only events of transactions older than every running one (AuditEvent.txid), in
    (txid, id) order from each subscription's cursor, so an event committed late is never
    passed over. Answers counts, and `more` when the batch was full.
    """
    horizon = _outbox_horizon()
    created: list = []
    more = False
    with transaction.atomic():
        subscriptions = list(
            WebhookSubscription.objects.select_for_update()
            .filter(workspace_id=workspace_id, is_active=True)
            .order_by("pk")
        )
        if not subscriptions:
            return {"deliveries": 0, "more": False}
        low = min((s.audit_txid_cursor, s.audit_id_cursor) for s in subscriptions)
        events = list(
            AuditEvent.objects.filter(workspace_id=workspace_id, txid__lt=horizon)
            .filter(Q(txid__gt=low[0]) | Q(txid=low[0], id__gt=low[1]))
            .order_by("txid", "id")[: DISPATCH_BATCH + 1]
        )
        more = len(events) > DISPATCH_BATCH
        events = events[:DISPATCH_BATCH]
        end = (events[-1].txid, events[-1].pk) if more else (horizon, 0)
        lease = timezone.now() + DELIVERY_LEASE
        rows = []
        for subscription in subscriptions:
            cursor = (subscription.audit_txid_cursor, subscription.audit_id_cursor)
            for event in events:
                if (event.txid, event.pk) <= cursor or event.entity_type not in AUDIT_ENTITY_TYPES:
                    continue
                event_type = event_type_for(event.entity_type, event.action, event.changes)
                if event_type is None or not subscription.wants(event_type):
                    continue
                delivery = WebhookDelivery(
                    subscription=subscription,
                    audit_event_id=event.pk,
                    event_id=f"evt_{event.pk}",
                    event_type=event_type,
                    next_attempt_at=lease,
                )
                delivery.payload = delivery_payload(_payload(event, event_type), delivery_id=delivery.pk)
                rows.append(delivery)
            if end > cursor:
                subscription.audit_txid_cursor, subscription.audit_id_cursor = end
                subscription.save(update_fields=["audit_txid_cursor", "audit_id_cursor"])
        # The subscription rows are locked and each cursor only moves forward, so no other
        # run creates these; the constraint still guards the invariant.
        created = WebhookDelivery.objects.bulk_create(rows)
        ids = [delivery.pk for delivery in created]
        transaction.on_commit(lambda: _deliveries_enqueue(ids))
        if more:
            from webhooks.tasks import webhooks_dispatch_task

            webhooks_dispatch_task.delay_on_commit(str(workspace_id))
    return {"deliveries": len(created), "more": more}


def _deliveries_enqueue(delivery_ids) -> None:
    from webhooks.tasks import webhook_deliver_task

    if not delivery_ids:
        return
    # Each message names the attempt it is for (webhook_deliver), read before the lease is
    # renewed: a message still queued from an earlier hand-out then sends nothing.
    attempts = {
        str(pk): count
        for pk, count in WebhookDelivery.objects.filter(pk__in=delivery_ids).values_list("pk", "attempts")
    }
    WebhookDelivery.objects.filter(pk__in=delivery_ids).update(
        next_attempt_at=timezone.now() + DELIVERY_LEASE
    )
    for delivery_id in map(str, delivery_ids):
        if delivery_id in attempts:
            webhook_deliver_task.delay(delivery_id, attempts[delivery_id])


def webhooks_sweep(*, now=None) -> dict:
    """Dispatch every workspace with subscribers (a nudge lost with its process), and hand
    out deliveries that are due again or whose task was lost."""
    from webhooks.tasks import webhooks_dispatch_task

    now = now or timezone.now()
    workspaces = list(
        WebhookSubscription.objects.filter(is_active=True).values_list("workspace_id", flat=True).distinct()
    )
    for workspace_id in workspaces:
        webhooks_dispatch_task.delay(str(workspace_id))
    with transaction.atomic():
        due = list(
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(
                status__in=(WebhookDelivery.Status.PENDING, WebhookDelivery.Status.RETRYING),
                subscription__is_active=True,
            )
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
            .order_by(F("next_attempt_at").asc(nulls_first=True))
            .values_list("pk", flat=True)[:SWEEP_BATCH]
        )
        transaction.on_commit(lambda: _deliveries_enqueue(due))
    return {"workspaces": len(workspaces), "deliveries": len(due)}


def webhook_deliveries_purge(*, now=None) -> int:
    """Delete finished deliveries older than WEBHOOKS_DELIVERY_RETENTION_DAYS."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.WEBHOOKS_DELIVERY_RETENTION_DAYS)
    deleted, _ = WebhookDelivery.objects.filter(
        created_at__lt=cutoff,
        status__in=(
            WebhookDelivery.Status.SUCCEEDED,
            WebhookDelivery.Status.FAILED,
            WebhookDelivery.Status.CANCELLED,
        ),
    ).delete()
    return deleted
