"""Exceptions raised by the client.

Every error body of the server has the shape ``{"error": {"code", "message", "fields"}}``;
`MemoryAPIError` carries those three parts plus the HTTP status, and a subclass per
status family lets callers catch what they can handle (``except NotFoundError``).
"""

from __future__ import annotations

from typing import Any

import httpx


class MemoryClientError(Exception):
    """Base class of everything this package raises."""


class TransportError(MemoryClientError):
    """The server could not be reached (after the configured retries)."""


class MemoryAPIError(MemoryClientError):
    """The server answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        code: str,
        fields: dict[str, Any] | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.fields = fields or {}
        self.response = response

    def __str__(self) -> str:
        text = f"{self.status_code} {self.code}: {self.message}"
        if self.fields:
            text += f" {self.fields}"
        return text


class ValidationError(MemoryAPIError):
    """400: the request was malformed; `fields` names what is wrong."""


class AuthenticationError(MemoryAPIError):
    """401: no key, or a key that is invalid, revoked or expired."""


class PermissionDeniedError(MemoryAPIError):
    """403: the key may not do this (for example a read-only key writing)."""


class NotFoundError(MemoryAPIError):
    """404: the object does not exist or belongs to another workspace or agent."""


class ConflictError(MemoryAPIError):
    """409: the request conflicts with the current state."""


class PayloadTooLargeError(MemoryAPIError):
    """413: the body is larger than the server accepts."""


class RateLimitedError(MemoryAPIError):
    """429: too many requests; `retry_after` is the server's hint in seconds."""

    @property
    def retry_after(self) -> float | None:
        if self.response is None:
            return None
        return _retry_after_seconds(self.response)


class ServerError(MemoryAPIError):
    """5xx: the server failed; safe requests were already retried."""


_BY_STATUS: dict[int, type[MemoryAPIError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: RateLimitedError,
}


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def error_from_response(response: httpx.Response) -> MemoryAPIError:
    """Build the exception for an error response, tolerating bodies that are not JSON."""
    code, message, fields = "error", response.reason_phrase or "HTTP error", {}
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        fields = error.get("fields") or {}
    elif response.text:
        message = response.text[:500]
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = ServerError if response.status_code >= 500 else MemoryAPIError
    return cls(message, status_code=response.status_code, code=code, fields=fields, response=response)
