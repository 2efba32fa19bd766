"""The MCP server's answers when the database is down or out of time: the REST API's bodies."""

import asyncio
import json
from types import SimpleNamespace
from unittest import mock

import psycopg
import pytest
from django.db import OperationalError
from mcp.server.mcpserver.exceptions import ToolError
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient

from core.errors import DATABASE_TIMEOUT, RETRY_AFTER_SECONDS, SERVICE_UNAVAILABLE
from runtime import mcp


def _unreachable() -> OperationalError:
    return OperationalError("connection refused")


def _timed_out() -> OperationalError:
    error = OperationalError("canceling statement due to lock timeout")
    error.__cause__ = psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    return error


FAILURES = [
    (_unreachable, "service_unavailable", SERVICE_UNAVAILABLE),
    (_timed_out, "database_timeout", DATABASE_TIMEOUT),
]


async def _inner(scope, receive, send):
    await PlainTextResponse("reached")(scope, receive, send)


def _authenticated_get(**patch):
    client = TestClient(mcp.ApiKeyMiddleware(_inner), raise_server_exceptions=False)
    with mock.patch.object(mcp, "_principal_for_secret", **patch):
        return client.get(mcp.MCP_PATH, headers={"Authorization": "Bearer mem_some_key"})


@pytest.mark.parametrize(("failure", "code", "message"), FAILURES)
def test_the_key_check_answers_503_when_the_database_fails(failure, code, message):
    """Checking the key needs the database: without it the client gets the REST API's 503 with
    Retry-After, not the ASGI server's bare 500."""
    response = _authenticated_get(side_effect=failure())
    assert response.status_code == 503
    assert response.json() == {"error": {"code": code, "message": message, "fields": {}}}
    assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)


def test_other_failures_of_the_key_check_still_propagate():
    response = _authenticated_get(side_effect=RuntimeError("a bug"))
    assert response.status_code == 500


def _run(**patch):
    request = SimpleNamespace(scope={mcp.PRINCIPAL_SCOPE_KEY: object()})
    ctx = SimpleNamespace(request_context=SimpleNamespace(request=request))
    with mock.patch.object(mcp, "_call", **patch):
        return asyncio.run(mcp._run_tool(ctx, "recall", {}))


@pytest.mark.parametrize(("failure", "code", "message"), FAILURES)
def test_a_tool_call_reports_the_apis_body_when_the_database_fails(failure, code, message):
    """The model reads the same body a REST client gets, which says to retry and after how
    long, instead of the SDK's "Error executing tool recall" with nothing to act on."""
    with pytest.raises(ToolError) as raised:
        _run(side_effect=failure())
    assert json.loads(str(raised.value)) == {
        "error": {
            "code": code,
            "message": message,
            "fields": {},
            "retryable": True,
            "retry_after": RETRY_AFTER_SECONDS,
        }
    }


def test_other_failures_of_a_tool_call_are_left_to_the_sdk():
    with pytest.raises(RuntimeError):
        _run(side_effect=RuntimeError("a bug"))
