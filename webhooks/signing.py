"""Signatures of webhook payloads: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.

The timestamp is inside the signed text, so a captured request cannot be replayed later
than the receiver's tolerance. Within it, a replay is caught by the body's `delivery_id`
(webhooks.events.DELIVERY_ID_FIELD): it is signed, unlike the `X-Memory-Delivery` header, so
receivers deduplicate on it. Receivers verify with `signature_verify` (the Python client
ships the same function, and `event_verify`, which also answers the parsed body).
"""

import hashlib
import hmac
import secrets
import time

SIGNATURE_HEADER = "X-Memory-Signature"
SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_SECONDS = 300


def secret_generate() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature_header(*, secret: str, body: bytes, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def signature_verify(
    *, secret: str, header: str, body: bytes, tolerance: int = DEFAULT_TOLERANCE_SECONDS, now=None
) -> bool:
    """True when `header` signs `body` with `secret` and its time is within `tolerance` seconds."""
    parts: dict[str, list[str]] = {}
    for item in (header or "").split(","):
        name, _, value = item.strip().partition("=")
        parts.setdefault(name, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature_header(secret=secret, body=body, timestamp=timestamp).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, candidate) for candidate in parts.get("v1", []))
