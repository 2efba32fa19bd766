"""Verify the signature of a webhook request from the memory server.

`X-Memory-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + raw body>`; check it
against the raw body before parsing it, and refuse times far from your clock (replays).
Deduplicate on the body's `delivery_id`, which the signature covers, not on the
`X-Memory-Delivery` header, which it does not: a request replayed within the tolerance under
a new header id still carries its signed `delivery_id`.
"""

import hashlib
import hmac
import json
import time

SIGNATURE_HEADER = "X-Memory-Signature"
DELIVERY_HEADER = "X-Memory-Delivery"
DEFAULT_TOLERANCE_SECONDS = 300
# The signed body's field naming the delivery (the same for every retry of it); `id` names
# the event, the same for every subscription that receives it.
DELIVERY_ID_FIELD = "delivery_id"
SIGNATURE_INVALID = "The webhook signature does not match the body, or its time is outside the tolerance."
BODY_INVALID = "The webhook body is not a JSON object with a delivery_id."


class WebhookVerificationError(ValueError):
    pass


def signature_verify(
    *,
    secret: str,
    header: str,
    body: bytes,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """True when `header` signs `body` with `secret` at a time within `tolerance` seconds of now."""
    parts: dict[str, list[str]] = {}
    for item in (header or "").split(","):
        name, _, value = item.strip().partition("=")
        parts.setdefault(name, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, candidate) for candidate in parts.get("v1", []))


def event_verify(
    *,
    secret: str,
    header: str,
    body: bytes,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict:
    """The event of a request whose signature holds, parsed from the raw `body`; raises
    WebhookVerificationError otherwise. Deduplicate on its `delivery_id` (signed), e.g.
    `event["delivery_id"]`, never on the unsigned X-Memory-Delivery header."""
    if not signature_verify(secret=secret, header=header, body=body, tolerance=tolerance, now=now):
        raise WebhookVerificationError(SIGNATURE_INVALID)
    try:
        event = json.loads(body)
    except ValueError as exc:
        raise WebhookVerificationError(BODY_INVALID) from exc
    if not isinstance(event, dict) or not isinstance(event.get(DELIVERY_ID_FIELD), str):
        raise WebhookVerificationError(BODY_INVALID)
    return event
