"""Every write of the webhooks app, by concern: subscriptions, dispatch (audit events ->
deliveries), delivery (sending)."""

from webhooks.services.delivery import webhook_deliver
from webhooks.services.dispatch import (
    webhook_active_cache_clear,
    webhook_deliveries_purge,
    webhooks_audit_listener,
    webhooks_dispatch,
    webhooks_sweep,
)
from webhooks.services.subscriptions import (
    WebhookUrlRefused,
    webhook_ping,
    webhook_secret_rotate,
    webhook_subscription_create,
    webhook_subscription_delete,
    webhook_subscription_update,
    webhook_url_check,
)

__all__ = [
    "WebhookUrlRefused",
    "webhook_active_cache_clear",
    "webhook_deliver",
    "webhook_deliveries_purge",
    "webhook_ping",
    "webhook_secret_rotate",
    "webhook_subscription_create",
    "webhook_subscription_delete",
    "webhook_subscription_update",
    "webhook_url_check",
    "webhooks_audit_listener",
    "webhooks_dispatch",
    "webhooks_sweep",
]
