from celery import shared_task

from core.tasks import DATABASE_UNAVAILABLE
from webhooks.services import webhook_deliver, webhook_deliveries_purge, webhooks_dispatch, webhooks_sweep

# Idempotent: each subscription's cursor only moves forward under its row lock. Swept:
# webhooks_sweep dispatches every workspace with subscribers (core.lib.celery_task).
DISPATCH_RETRY = {
    "autoretry_for": DATABASE_UNAVAILABLE,
    "retry_backoff": 5,
    "retry_backoff_max": 120,
    "retry_jitter": True,
    "max_retries": 5,
    "swept": True,
}


@shared_task(**DISPATCH_RETRY)
def webhooks_dispatch_task(workspace_id: str):
    return webhooks_dispatch(workspace_id=workspace_id)


# Retries of a failed POST are scheduled in the database (next_attempt_at) and handed out by
# the sweep, not held in the broker as countdowns. Each message names the attempt it is for,
# claimed once (webhook_deliver). A worker lost after its POST may still leave the receiver
# a second copy, sent by the sweep; receivers deduplicate by X-Memory-Delivery
# (docs/webhooks.md).
# Swept: webhooks_sweep hands out deliveries whose task was lost.
@shared_task(
    autoretry_for=DATABASE_UNAVAILABLE, retry_backoff=5, retry_backoff_max=120, max_retries=5, swept=True
)
def webhook_deliver_task(delivery_id: str, attempt: int | None = None):
    delivery = webhook_deliver(delivery_id=delivery_id, attempt=attempt)
    return None if delivery is None else delivery.status


@shared_task
def webhooks_sweep_task():
    return webhooks_sweep()


@shared_task
def webhook_deliveries_purge_task():
    return webhook_deliveries_purge()
