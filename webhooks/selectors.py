"""Reads of webhook subscriptions and their delivery logs: workspace-level, so an agent-bound
key is refused (403) and another workspace's rows are not found (404)."""

from core.access import Principal, require_workspace_key
from core.errors import NotFoundError
from core.filters import filterset_apply
from webhooks.filters import WebhookDeliveryFilter
from webhooks.models import WebhookDelivery, WebhookSubscription

SUBSCRIPTION_NOT_FOUND = "Webhook subscription not found."


def webhook_subscription_list(*, principal: Principal):
    require_workspace_key(principal)
    return WebhookSubscription.objects.for_workspace(principal.workspace).order_by("-created_at")


def webhook_subscription_get(*, principal: Principal, subscription_id) -> WebhookSubscription:
    subscription = webhook_subscription_list(principal=principal).filter(pk=subscription_id).first()
    if subscription is None:
        raise NotFoundError(SUBSCRIPTION_NOT_FOUND)
    return subscription


def webhook_delivery_list(*, principal: Principal, subscription_id, filters=None):
    subscription = webhook_subscription_get(principal=principal, subscription_id=subscription_id)
    queryset = WebhookDelivery.objects.filter(subscription=subscription).order_by("-created_at")
    return filterset_apply(WebhookDeliveryFilter, filters, queryset)
