"""The MCP server in its own process, driven by the official SDK client over streamable HTTP."""

import asyncio
import json
import threading
import time

import httpx
import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.errors import DATABASE_TIMEOUT
from core.testing import database_url
from facts.models import Fact
from runtime.testing import live_mcp_server, server_env

pytestmark = pytest.mark.slow


def mcp_client(server, key):
    # Generous: the first call in a fresh process loads the local embedding model.
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=180)
    return Client(streamable_http_client(server.url + "/mcp", http_client=http))


def call(server, key, name, arguments):
    async def scenario():
        async with mcp_client(server, key) as client:
            return await client.call_tool(name, arguments)

    return asyncio.run(scenario())


def error_of(result) -> dict:
    """The API's error body, which the SDK prefixes with "Error executing tool <name>: "."""
    assert result.is_error
    text = result.content[0].text
    return json.loads(text[text.index("{") :])["error"]


def test_requests_without_a_valid_key_get_401(live_mcp, fresh_workspace):
    """Every request to /mcp needs an API key; the body is the API's error contract."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    missing = httpx.post(live_mcp.url + "/mcp", json=body)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "not_authenticated"
    wrong = httpx.post(live_mcp.url + "/mcp", json=body, headers={"Authorization": "Bearer mem_bad_key"})
    assert wrong.status_code == 401


def test_lists_the_agent_tools(live_mcp, fresh_workspace):
    async def scenario():
        async with mcp_client(live_mcp, fresh_workspace["key"]) as client:
            return await client.list_tools()

    tools = {tool.name: tool for tool in asyncio.run(scenario()).tools}
    assert {"recall", "remember", "recall_memory", "identify_user", "history", "context"} <= set(tools)
    assert "external_id" in tools["identify_user"].input_schema["properties"]
    assert "principal" not in tools["remember"].input_schema["properties"]
    assert tools["recall"].annotations.read_only_hint is True


def test_remember_and_recall_scoped_to_the_key(live_mcp, fresh_workspace):
    """Facts written through MCP are read back with the same key and invisible to an outsider."""
    key = fresh_workspace["key"]
    person = call(live_mcp, key, "identify_user", {"channel": "telegram", "external_id": "42"})
    assert not person.is_error
    user_id = person.structured_content["memory_user"]["id"]
    stored = call(
        live_mcp,
        key,
        "remember",
        {"key": "favourite_tea", "value": "oolong", "memory_user": user_id, "fact_type": "user_preference"},
    )
    assert stored.structured_content["outcome"] == "created"
    found = call(live_mcp, key, "recall", {"key": "favourite_tea", "memory_user": user_id})
    assert [f["value"] for f in found.structured_content["facts"]] == ["oolong"]

    outsider = call(live_mcp, fresh_workspace["outsider_key"], "recall", {"key": "x", "memory_user": user_id})
    assert error_of(outsider)["code"] == "not_found"


def test_read_only_key_cannot_write_through_mcp(live_mcp, fresh_workspace):
    result = call(
        live_mcp, fresh_workspace["read_only_key"], "identify_user", {"channel": "web", "external_id": "1"}
    )
    assert error_of(result)["code"] == "read_only"


def test_bad_arguments_come_back_as_field_errors(live_mcp, fresh_workspace):
    result = call(live_mcp, fresh_workspace["key"], "remember", {"key": "k", "value": 1, "scope": "user"})
    error = error_of(result)
    assert error["code"] == "invalid"
    assert "memory_user" in error["fields"]


def test_arguments_pass_the_api_json_guard(live_mcp, fresh_workspace):
    """A NUL inside a tool argument is the API's 400 body, never a database error, and stores nothing."""
    key = fresh_workspace["key"]
    person = call(live_mcp, key, "identify_user", {"channel": "telegram", "external_id": "nul-guard"})
    user_id = person.structured_content["memory_user"]["id"]
    result = call(
        live_mcp,
        key,
        "remember",
        {"key": "motto", "value": {"text": "a\u0000b"}, "memory_user": user_id, "scope": "user"},
    )
    error = error_of(result)
    assert error["code"] == "malformed_request"
    assert "value.text" in error["fields"]
    found = call(live_mcp, key, "recall", {"key": "motto", "memory_user": user_id})
    assert found.structured_content["facts"] == []


def test_a_tool_call_waiting_on_a_lock_ends_with_the_apis_retryable_error(fresh_workspace):
    """The MCP server's statements and lock waits are limited as a web process's are: a call
    queued behind a lock that another session holds ends after
    DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS with the REST API's `database_timeout` body, instead
    of waiting as long as the lock is held; once the lock is gone the same call is answered."""
    key = fresh_workspace["key"]
    with live_mcp_server(env=server_env(DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS="1")) as server:
        person = call(server, key, "identify_user", {"channel": "telegram", "external_id": "locked-out"})
        user_id = person.structured_content["memory_user"]["id"]
        with psycopg.connect(database_url()) as holder:
            holder.execute(f"LOCK TABLE {Fact._meta.db_table} IN ACCESS EXCLUSIVE MODE")
            # Without a limit the call would wait for this release (and then succeed).
            release = threading.Timer(15, holder.rollback)
            release.start()
            started = time.monotonic()
            try:
                result = call(server, key, "recall", {"key": "favourite_tea", "memory_user": user_id})
            finally:
                waited = time.monotonic() - started
                release.cancel()
                holder.rollback()
        assert waited < 10
        error = error_of(result)
        assert error["code"] == "database_timeout", error
        assert error["message"] == DATABASE_TIMEOUT
        found = call(server, key, "recall", {"key": "favourite_tea", "memory_user": user_id})
        assert not found.is_error
        assert found.structured_content["facts"] == []
