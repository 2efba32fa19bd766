"""Transport shared by the sync and async clients: requests, retries, error mapping.

Retries: a request is retried on connection failures, on 429 (honouring ``Retry-After``)
and on 502/503/504, with exponential backoff and jitter. A request that may have reached
the server is retried only when repeating it is harmless: GET, PUT and DELETE, and POSTs
marked idempotent (reads such as search and recall, and writes that carry idempotency
keys, which the client generates once per call so every retry reuses them). A
non-idempotent POST is retried only when the connection failed before anything was sent.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from memory_client.errors import TransportError, _retry_after_seconds, error_from_response

DEFAULT_TIMEOUT = 30.0
USER_AGENT = "memory-client-python/0.1"

# Failures raised before the request left the client: always safe to retry.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after the request may have reached the server.
_MAYBE_SENT = (
    httpx.ReadError,
    httpx.ReadTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry. ``max_attempts=1`` disables retries."""

    max_attempts: int = 4
    backoff: float = 0.2
    max_backoff: float = 5.0
    retry_statuses: frozenset[int] = field(default_factory=lambda: frozenset({429, 502, 503, 504}))

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        if response is not None:
            hinted = _retry_after_seconds(response)
            if hinted is not None:
                return min(hinted, self.max_backoff)
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)


@dataclass
class Request:
    """One logical API call; retried as a unit with the same body (and idempotency keys)."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    idempotent: bool | None = None
    expect_empty: bool = False
    # A body sent as it is (an import's JSON lines) instead of `json`, with its media type.
    content: bytes | None = None
    content_type: str | None = None
    # The answer's text as it is (an export's JSON lines), not decoded as JSON.
    text: bool = False

    def body(self) -> dict[str, Any]:
        """httpx's keyword arguments for the body."""
        if self.content is not None:
            return {"content": self.content, "headers": {"Content-Type": self.content_type or ""}}
        return {"json": self.json}

    @property
    def retry_safe(self) -> bool:
        if self.idempotent is not None:
            return self.idempotent
        return self.method in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")


def clean_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Drop None values and render booleans the way the server's filters read them."""
    if not params:
        return None
    cleaned: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        cleaned[key] = value
    return cleaned


def _should_retry_status(policy: RetryPolicy, request: Request, response: httpx.Response) -> bool:
    if response.status_code not in policy.retry_statuses:
        return False
    # A 429 means the request was refused before it ran, so it is safe to repeat.
    return response.status_code == 429 or request.retry_safe


def _decode(request: Request, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise error_from_response(response)
    if request.text:
        return response.text
    if request.expect_empty or response.status_code == 204 or not response.content:
        return None
    return response.json()


def build_headers(api_key: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if extra:
        headers.update(extra)
    return headers


def api_root(base_url: str) -> str:
    """Accept ``http://host:port`` or ``http://host:port/api/v1``."""
    base = base_url.rstrip("/")
    if not base.endswith("/api/v1"):
        base += "/api/v1"
    return base + "/"


class SyncTransport:
    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._owns_client = http_client is None
        self.http = http_client or httpx.Client(timeout=timeout)
        self.http.base_url = api_root(base_url)
        self.http.headers.update(build_headers(api_key, headers))

    def close(self) -> None:
        if self._owns_client:
            self.http.close()

    def send(self, request: Request) -> Any:
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self.retry.max_attempts
            try:
                response = self.http.request(
                    request.method,
                    request.path.lstrip("/"),
                    params=clean_params(request.params),
                    **request.body(),
                )
            except _NOT_SENT as exc:
                if last:
                    raise TransportError(f"{request.method} {request.path}: {exc}") from exc
                time.sleep(self.retry.delay(attempt))
                continue
            except _MAYBE_SENT as exc:
                if last or not request.retry_safe:
                    raise TransportError(f"{request.method} {request.path}: {exc}") from exc
                time.sleep(self.retry.delay(attempt))
                continue
            if not last and _should_retry_status(self.retry, request, response):
                time.sleep(self.retry.delay(attempt, response))
                continue
            return _decode(request, response)


class AsyncTransport:
    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._owns_client = http_client is None
        self.http = http_client or httpx.AsyncClient(timeout=timeout)
        self.http.base_url = api_root(base_url)
        self.http.headers.update(build_headers(api_key, headers))

    async def close(self) -> None:
        if self._owns_client:
            await self.http.aclose()

    async def send(self, request: Request) -> Any:
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self.retry.max_attempts
            try:
                response = await self.http.request(
                    request.method,
                    request.path.lstrip("/"),
                    params=clean_params(request.params),
                    **request.body(),
                )
            except _NOT_SENT as exc:
                if last:
                    raise TransportError(f"{request.method} {request.path}: {exc}") from exc
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            except _MAYBE_SENT as exc:
                if last or not request.retry_safe:
                    raise TransportError(f"{request.method} {request.path}: {exc}") from exc
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if not last and _should_retry_status(self.retry, request, response):
                await asyncio.sleep(self.retry.delay(attempt, response))
                continue
            return _decode(request, response)
