"""The client against a live server: errors, pagination and safe retries."""

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from memory_client import (
    AuthenticationError,
    MemoryClient,
    NotFoundError,
    PermissionDeniedError,
    RetryPolicy,
    TransportError,
    ValidationError,
)
from memory_client._core import Request

pytestmark = pytest.mark.slow

FAST_RETRY = RetryPolicy(max_attempts=3, backoff=0.01, max_backoff=0.05)


def test_invalid_key_raises_authentication_error(live_server_url, workspace_keys):
    """A wrong key maps the server's 401 body to AuthenticationError with its code."""
    client = MemoryClient(live_server_url, "mem_nope_nope")
    with client, pytest.raises(AuthenticationError) as caught:
        client.agents.list()
    assert caught.value.status_code == 401
    assert caught.value.code == "not_authenticated"


def test_validation_error_carries_field_errors(client):
    """A 400 exposes the server's per-field messages."""
    with pytest.raises(ValidationError) as caught:
        client.agents.create(slug="not a slug!")
    assert "slug" in caught.value.fields


def test_unknown_field_is_rejected_not_dropped(client):
    with pytest.raises(ValidationError) as caught:
        client.agents.create(slug="fine", colour="blue")
    assert caught.value.fields == {"colour": ["Unknown field."]}


def test_not_found(client):
    with pytest.raises(NotFoundError) as caught:
        client.agents.get("nobody")
    assert caught.value.code == "not_found"


def test_read_only_key_cannot_write(live_server_url, workspace_keys):
    with MemoryClient(live_server_url, workspace_keys["read_only_key"]) as client:
        assert client.agents.list()["count"] == 1
        with pytest.raises(PermissionDeniedError):
            client.agents.create(slug="writer")


def test_paginate_walks_every_page(client):
    """paginate() follows pages of `page_size` until the server has no next page."""
    for index in range(7):
        client.agents.create(slug=f"agent-{index}")
    slugs = [agent["slug"] for agent in client.paginate(client.agents.list, page_size=3)]
    assert len(slugs) == 8
    assert len(set(slugs)) == 8


def test_async_client_and_paginate(async_client_factory):
    async def scenario():
        async with async_client_factory() as client:
            await client.agents.create(slug="async-agent")
            slugs = [agent["slug"] async for agent in client.paginate(client.agents.list, page_size=1)]
            assert sorted(slugs) == ["assistant", "async-agent"]
            with pytest.raises(NotFoundError):
                await client.agents.get("missing")

    asyncio.run(scenario())


_HOP_HEADERS = ("host", "content-length", "transfer-encoding", "connection", "content-encoding")


class _FlakyProxy:
    """Forwards to the live server, but answers the first `failures` matching requests with 503
    or drops the connection after forwarding (the response is lost, the write happened)."""

    def __init__(self, upstream: str, *, failures: int, mode: str, path_contains: str = ""):
        self.upstream = upstream
        self.failures = failures
        self.mode = mode
        self.path_contains = path_contains
        self.seen: list[tuple[str, str, bytes]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.seen.append((self.command, self.path, body))
                failing = proxy.path_contains in self.path and proxy.failures > 0
                if failing and proxy.mode == "503":
                    proxy.failures -= 1
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Retry-After", "0")
                    payload = b'{"error": {"code": "unavailable", "message": "try again", "fields": {}}}'
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                url = proxy.upstream + self.path
                response = httpx.request(self.command, url, headers=headers, content=body)
                if failing and proxy.mode == "drop":
                    proxy.failures -= 1
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.send_response(response.status_code)
                for key, value in response.headers.items():
                    if key.lower() not in _HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_safe_request_is_retried_after_503(live_server_url, workspace_keys):
    proxy = _FlakyProxy(live_server_url, failures=2, mode="503", path_contains="/agents/")
    try:
        with MemoryClient(proxy.url, workspace_keys["key"], retry=FAST_RETRY) as client:
            assert client.agents.list()["count"] == 1
        assert len(proxy.seen) == 3
    finally:
        proxy.close()


def test_non_idempotent_post_is_not_retried_after_503(live_server_url, workspace_keys):
    """A POST that may have run is surfaced, not repeated (it could store twice)."""
    proxy = _FlakyProxy(live_server_url, failures=1, mode="503", path_contains="/agents/")
    try:
        with MemoryClient(proxy.url, workspace_keys["key"], retry=FAST_RETRY) as client:
            with pytest.raises(Exception) as caught:
                client.agents.create(slug="once")
            assert getattr(caught.value, "status_code", None) == 503
        assert len(proxy.seen) == 1
    finally:
        proxy.close()


def test_connection_refused_is_retried_then_reported():
    client = MemoryClient("http://127.0.0.1:9", "mem_x_y", retry=FAST_RETRY)
    with client, pytest.raises(TransportError):
        client.transport.send(Request("POST", "agents/", json={"slug": "x"}))
