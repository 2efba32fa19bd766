"""Subscriptions: create, change, rotate the secret, delete, ping; and which URLs may receive."""

from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.access import Principal, require_workspace_key, require_write
from core.errors import ApplicationError, NotFoundError
from core.lib.addresses import address_public, host_addresses
from core.lib.crypto import encrypt
from core.models import AuditEvent
from core.services import audit_record
from webhooks.events import EVENT_TYPES, PING, delivery_payload
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.selectors import SUBSCRIPTION_NOT_FOUND
from webhooks.services.dispatch import (
    DELIVERY_LEASE,
    _deliveries_enqueue,
    _outbox_horizon,
    webhook_active_cache_clear,
)
from webhooks.signing import secret_generate

ENTITY_TYPE = "webhook_subscription"
URL_PRIVATE = "This URL's host is a private, loopback or link-local address; webhooks are not sent there."
URL_SCHEME = "Enter an http:// or https:// URL."
URL_CREDENTIALS = "Put no user name or password in the URL; sign requests with the subscription's secret."
URL_UNRESOLVED = "This URL's host could not be resolved."
EVENTS_UNKNOWN = "Unknown event type: {names}. Known: {known}."


class WebhookUrlRefused(Exception):
    pass


def webhook_url_check(url: str) -> str | None:
    """Raise WebhookUrlRefused when `url` is not one webhooks may be sent to.

    Answers the checked address to connect to, or None when private addresses are allowed:
    a sender that looked the name up again could get another answer (DNS rebinding).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookUrlRefused(URL_SCHEME)
    if parts.username or parts.password:
        raise WebhookUrlRefused(URL_CREDENTIALS)
    if settings.WEBHOOKS_ALLOW_PRIVATE_URLS:
        return None
    try:
        # The name the request carries (IDNA 2008, as httpx encodes it), not the IDNA 2003
        # form the resolver would make of urlsplit's, which names another host for "faß".
        host = httpx.URL(url).raw_host.decode("ascii")
        addresses = host_addresses(host)
    except (OSError, UnicodeError, ValueError, httpx.InvalidURL) as exc:
        raise WebhookUrlRefused(URL_UNRESOLVED) from exc
    if not addresses or not all(address_public(address) for address in addresses):
        raise WebhookUrlRefused(URL_PRIVATE)
    return str(addresses[0])


def _url_validate(url: str) -> str:
    url = url.strip()
    try:
        webhook_url_check(url)
    except WebhookUrlRefused as exc:
        raise ApplicationError(str(exc), fields={"url": [str(exc)]}) from exc
    return url


def _events_validate(events) -> list[str]:
    events = sorted(set(events or ()))
    unknown = [name for name in events if name not in EVENT_TYPES]
    if unknown:
        message = EVENTS_UNKNOWN.format(names=", ".join(unknown), known=", ".join(EVENT_TYPES))
        raise ApplicationError(message, fields={"events": [message]})
    return events


def _audit(subscription: WebhookSubscription, *, actor: str, action: str, changes: dict) -> None:
    audit_record(
        workspace=subscription.workspace,
        actor=actor,
        action=action,
        entity_type=ENTITY_TYPE,
        entity_id=subscription.pk,
        changes=changes,
    )


def _require_admin(principal: Principal) -> None:
    """Subscriptions send every agent's events: a workspace-wide key, or an admin operator."""
    require_workspace_key(principal)
    require_write(principal)
    if principal.api_key is None and not principal.can_admin:
        raise ApplicationError("Only workspace admins manage webhooks.", code="forbidden", status_code=403)


def webhook_subscription_create(
    *, principal: Principal, url: str, events=(), description: str = ""
) -> tuple[WebhookSubscription, str]:
    """Create a subscription; returns it and its signing secret, which is shown this once.

    It receives events of transactions that end after this one began.
    """
    _require_admin(principal)
    secret = secret_generate()
    horizon = _outbox_horizon()
    with transaction.atomic():
        subscription = WebhookSubscription(
            workspace=principal.workspace,
            url=_url_validate(url),
            events=_events_validate(events),
            description=description,
            secret_encrypted=encrypt(secret),
            audit_txid_cursor=horizon,
        )
        subscription.full_clean()
        subscription.save()
        _audit(
            subscription,
            actor=principal.actor,
            action=AuditEvent.Action.CREATE,
            changes={"url": subscription.url, "events": subscription.events},
        )
    webhook_active_cache_clear()
    return subscription, secret


def webhook_subscription_update(
    *, principal: Principal, subscription: WebhookSubscription, **fields
) -> WebhookSubscription:
    """Change url, events, description or is_active. Enabling again clears the failure count;
    events missed while disabled are not sent."""
    _require_admin(principal)
    changes = {}
    if "url" in fields:
        fields["url"] = _url_validate(fields["url"])
    if "events" in fields:
        fields["events"] = _events_validate(fields["events"])
    with transaction.atomic():
        subscription = _subscription_locked(subscription)
        for name in ("url", "events", "description", "is_active"):
            if name in fields and getattr(subscription, name) != fields[name]:
                changes[name] = {"from": getattr(subscription, name), "to": fields[name]}
                setattr(subscription, name, fields[name])
        if changes.get("is_active", {}).get("to") is True:
            subscription.consecutive_failures = 0
            subscription.disabled_reason = ""
            subscription.disabled_at = None
            subscription.audit_txid_cursor = _outbox_horizon()
            subscription.audit_id_cursor = 0
        elif changes.get("is_active", {}).get("to") is False:
            subscription.disabled_reason = "Disabled by " + principal.actor
            subscription.disabled_at = timezone.now()
        if changes:
            subscription.full_clean()
            subscription.save()
            _audit(subscription, actor=principal.actor, action=AuditEvent.Action.UPDATE, changes=changes)
    webhook_active_cache_clear()
    return subscription


def webhook_secret_rotate(*, principal: Principal, subscription: WebhookSubscription) -> str:
    """A new signing secret, returned this once; the old one stops signing at once."""
    _require_admin(principal)
    secret = secret_generate()
    with transaction.atomic():
        rotated = WebhookSubscription.objects.filter(pk=subscription.pk).update(
            secret_encrypted=encrypt(secret), updated_at=timezone.now()
        )
        if not rotated:
            raise NotFoundError(SUBSCRIPTION_NOT_FOUND)
        _audit(
            subscription,
            actor=principal.actor,
            action=AuditEvent.Action.UPDATE,
            changes={"secret": "rotated"},
        )
    return secret


def webhook_subscription_delete(*, principal: Principal, subscription: WebhookSubscription) -> None:
    _require_admin(principal)
    with transaction.atomic():
        _audit(
            subscription,
            actor=principal.actor,
            action=AuditEvent.Action.DELETE,
            changes={"url": subscription.url},
        )
        subscription.delete()
    webhook_active_cache_clear()


def webhook_ping(*, principal: Principal, subscription: WebhookSubscription) -> WebhookDelivery:
    """Queue a `ping` event to the subscription, whatever events it asked for."""
    _require_admin(principal)
    now = timezone.now()
    delivery = WebhookDelivery(
        subscription=subscription, event_type=PING, payload={}, next_attempt_at=now + DELIVERY_LEASE
    )
    delivery.event_id = f"evt_ping_{delivery.pk.hex}"
    delivery.payload = delivery_payload(
        {
            "id": delivery.event_id,
            "type": PING,
            "created_at": now.isoformat(),
            "workspace": str(subscription.workspace_id),
            "actor": principal.actor,
            "data": {"object": "subscription", "id": str(subscription.pk)},
        },
        delivery_id=delivery.pk,
    )
    with transaction.atomic():
        # Held until the delivery is stored: a delete meanwhile would leave it pointing nowhere.
        _subscription_locked(subscription, no_key=True)
        delivery.save()
    _deliveries_enqueue([delivery.pk])
    return delivery


def _subscription_locked(subscription: WebhookSubscription, *, no_key: bool = False) -> WebhookSubscription:
    """`subscription` read again under a row lock, in the caller's transaction; a 404 when it
    was deleted since the caller read it."""
    locked = WebhookSubscription.objects.select_for_update(no_key=no_key).filter(pk=subscription.pk).first()
    if locked is None:
        raise NotFoundError(SUBSCRIPTION_NOT_FOUND)
    return locked
