"""Sending one delivery: the signed POST, its outcome, retries, and disabling a failing URL.

Delivery is at least once: a receiver may see an event twice (a worker that died after the
POST but before recording it) and deduplicates by the body's signed `delivery_id`, which every
retry repeats (the `X-Memory-Delivery` header holds the same id but is not signed). Events of
one subscription are not ordered across retries; each carries its time.
"""

import json
import logging
import random
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.lib.addresses import pinned_client, url_pinned
from core.lib.crypto import decrypt
from core.lib.http import http_client
from core.models import AuditEvent
from webhooks.events import delivery_payload
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services.dispatch import DELIVERY_LEASE, webhook_active_cache_clear
from webhooks.services.subscriptions import WebhookUrlRefused, _audit, webhook_url_check
from webhooks.signing import SIGNATURE_HEADER, signature_header

logger = logging.getLogger(__name__)
SYSTEM_ACTOR = "system:webhooks"
USER_AGENT = "memory-server-webhooks/1"


def _retry_delay(attempts: int) -> timedelta:
    base = settings.WEBHOOKS_RETRY_BASE_SECONDS * 2 ** max(attempts - 1, 0)
    seconds = min(base, settings.WEBHOOKS_RETRY_MAX_SECONDS)
    return timedelta(seconds=seconds * random.uniform(0.9, 1.1))


def _post(subscription: WebhookSubscription, delivery: WebhookDelivery) -> tuple[int | None, str]:
    """POST the signed payload; answers (HTTP status or None, error text or "")."""
    # Built from the row alone, so every retry sends the same bytes; rows stored before the
    # payload held its delivery id get it here.
    payload = delivery_payload(delivery.payload, delivery_id=delivery.pk)
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Memory-Event": delivery.event_type,
        "X-Memory-Delivery": str(delivery.pk),
        SIGNATURE_HEADER: signature_header(secret=decrypt(subscription.secret_encrypted), body=body),
    }
    try:
        url = httpx.URL(subscription.url)
        address = webhook_url_check(subscription.url)
        extensions = {}
        client = http_client()
        if address is not None:
            # Connect to the address just checked, not to a second DNS answer; the name still
            # goes in Host and, for TLS, in SNI and the certificate check. The client is the
            # name's own: a pool shared by names would carry this name's request on a
            # connection verified for another name at that address.
            client = pinned_client(url)
            url, pinned_headers, extensions = url_pinned(url, address)
            headers.update(pinned_headers)
        response = client.post(
            url,
            content=body,
            headers=headers,
            timeout=settings.WEBHOOKS_TIMEOUT_SECONDS,
            follow_redirects=False,
            extensions=extensions,
        )
    except WebhookUrlRefused as exc:
        return None, str(exc)
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
        # InvalidURL, UnicodeError (IDNA), ValueError: a URL valid when subscribing that the
        # client cannot send to is a failed attempt, counted towards disabling.
        return None, f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}"


WAITING = (WebhookDelivery.Status.PENDING, WebhookDelivery.Status.RETRYING)


def webhook_deliver(*, delivery_id, attempt: int | None = None) -> WebhookDelivery | None:
    """Send one delivery once, and record the outcome: succeeded, retrying at a later time,
    or failed after the last attempt. A subscription that failed too often in a row is
    disabled, and its waiting deliveries cancelled.

    `attempt` is the count of attempts made when the delivery was handed to a worker: a
    second message of that hand-out (the sweep hands a delivery out again when its task
    waited in the queue past the lease) finds the attempt taken and sends nothing.
    """
    delivery = WebhookDelivery.objects.select_related("subscription").filter(pk=delivery_id).first()
    if delivery is None or delivery.status not in WAITING:
        return delivery
    subscription = delivery.subscription
    if not subscription.is_active:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=WebhookDelivery.Status.CANCELLED, next_attempt_at=None
        )
        delivery.refresh_from_db()
        return delivery
    expected = delivery.attempts if attempt is None else attempt
    now = timezone.now()
    # Compare-and-set claim of this attempt, so two workers never send it both. A worker
    # lost after the claim leaves the attempt counted (it may have been sent) and the lease,
    # after which the sweep hands the delivery out again.
    claimed = WebhookDelivery.objects.filter(pk=delivery.pk, status__in=WAITING, attempts=expected).update(
        attempts=expected + 1, last_attempt_at=now, next_attempt_at=now + DELIVERY_LEASE
    )
    if not claimed:
        return WebhookDelivery.objects.filter(pk=delivery.pk).first()
    response_status, error = _post(subscription, delivery)
    now = timezone.now()
    with transaction.atomic():
        # The subscription first: disabling it below updates its deliveries.
        subscription = WebhookSubscription.objects.select_for_update().filter(pk=subscription.pk).first()
        delivery = WebhookDelivery.objects.select_for_update().filter(pk=delivery.pk).first()
        if subscription is None or delivery is None:
            return None  # deleted, with its log, while the request was in flight
        delivery.last_attempt_at = now
        delivery.response_status = response_status
        delivery.last_error = error
        if not error:
            delivery.status = WebhookDelivery.Status.SUCCEEDED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
            subscription.consecutive_failures = 0
            subscription.last_delivery_at = now
        else:
            subscription.consecutive_failures += 1
            if delivery.status not in WAITING:
                pass  # cancelled while in flight (its subscription disabled): stays so
            elif delivery.attempts >= settings.WEBHOOKS_MAX_ATTEMPTS:
                delivery.status = WebhookDelivery.Status.FAILED
                delivery.next_attempt_at = None
            else:
                delivery.status = WebhookDelivery.Status.RETRYING
                delivery.next_attempt_at = now + _retry_delay(delivery.attempts)
        delivery.save()
        subscription.save(update_fields=["consecutive_failures", "last_delivery_at", "updated_at"])
        if (
            subscription.is_active
            and subscription.consecutive_failures >= settings.WEBHOOKS_DISABLE_AFTER_FAILURES
        ):
            _subscription_disable(subscription, now=now)
    return delivery


def _subscription_disable(subscription: WebhookSubscription, *, now) -> None:
    reason = f"Disabled after {subscription.consecutive_failures} failed attempts in a row."
    WebhookSubscription.objects.filter(pk=subscription.pk).update(
        is_active=False, disabled_reason=reason, disabled_at=now, updated_at=now
    )
    cancelled = WebhookDelivery.objects.filter(
        subscription=subscription,
        status__in=(WebhookDelivery.Status.PENDING, WebhookDelivery.Status.RETRYING),
    ).update(status=WebhookDelivery.Status.CANCELLED, next_attempt_at=None)
    _audit(
        subscription,
        actor=SYSTEM_ACTOR,
        action=AuditEvent.Action.UPDATE,
        changes={"is_active": {"from": True, "to": False}, "reason": reason, "cancelled": cancelled},
    )
    logger.warning("Webhook subscription %s disabled: %s", subscription.pk, reason)
    webhook_active_cache_clear()
