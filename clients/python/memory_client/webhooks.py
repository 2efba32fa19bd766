"""Verify the signature of a webhook request from the memory server.

`X-Memory-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + raw body>`; check it
against the raw body before parsing it, and refuse times far from your clock (replays).
"""

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Memory-Signature"
DEFAULT_TOLERANCE_SECONDS = 300


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
