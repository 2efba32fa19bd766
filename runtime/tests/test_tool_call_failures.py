"""A failure of one tool call is that call's result, on both transports, and undoes only that call."""

import asyncio
import json
from types import SimpleNamespace
from unittest import mock

import pytest
from django.db import DataError, connection
from mcp.server.mcpserver.exceptions import ToolError
from rest_framework.test import APIClient

from core.errors import VALUE_REFUSED, error_body
from core.testing import MemoryTestCase
from facts import services as fact_services
from facts.models import Fact
from runtime import mcp
from runtime.testing import mcp_http_post
from runtime.tool_calls import TOOL_UNKNOWN

URL = "/api/v1/tools/call/"
REAL_FACT_REMEMBER = fact_services.fact_remember


def remember_call(key, call_id):
    return {"type": "tool_use", "id": call_id, "name": "remember", "input": {"key": key, "value": "v"}}


def remember_then_refused(**kwargs):
    """fact_remember that stores its fact and then meets a statement the database refuses
    (division by zero is SQLSTATE class 22, a DataError like a value out of range), for the
    key "refused": the call fails half-way through its writes."""
    result = REAL_FACT_REMEMBER(**kwargs)
    if kwargs["key"] == "refused":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")
    return result


class ToolCallDatabaseFailureTests(MemoryTestCase):
    def post(self, body, client=None):
        client = client or self.api()
        return client.post(URL, body, format="json")

    def test_a_database_error_in_one_call_of_a_list_is_that_calls_result(self):
        """The failed call answers with the API's error body and stores nothing; the calls
        before it (committed) and after it (still run) answer as usual. A 400 for the whole
        list would tell the agent nothing ran, and it would repeat the committed writes."""
        body = [
            remember_call("first", "toolu_1"),
            remember_call("refused", "toolu_2"),
            remember_call("third", "toolu_3"),
        ]
        with mock.patch.object(fact_services, "fact_remember", side_effect=remember_then_refused):
            response = self.post(body)
        assert response.status_code == 200, response.content
        first, refused, third = response.json()
        assert "is_error" not in first and "is_error" not in third
        assert refused["is_error"] is True
        assert refused["tool_use_id"] == "toolu_2"
        assert json.loads(refused["content"]) == error_body("invalid", VALUE_REFUSED)
        assert set(Fact.objects.filter(workspace=self.workspace).values_list("key", flat=True)) == {
            "first",
            "third",
        }

    def test_a_single_call_that_the_database_refuses_is_an_error_result(self):
        """As for any failing tool: a 200 whose result carries the error body (MCP's answer)."""
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "remember", "arguments": '{"key": "refused", "value": 1}'},
        }
        with mock.patch.object(fact_services, "fact_remember", side_effect=remember_then_refused):
            response = self.post(call)
        assert response.status_code == 200, response.content
        assert json.loads(response.json()["content"]) == error_body("invalid", VALUE_REFUSED)
        assert not Fact.objects.filter(workspace=self.workspace, key="refused").exists()

    def test_a_database_error_raised_by_a_service_is_that_calls_result(self):
        """A DataError from a service, whatever raised it, takes the same path."""
        body = [
            remember_call("first", "toolu_1"),
            {"name": "remember", "arguments": {"key": "x", "value": 1}},
        ]
        calls = iter([REAL_FACT_REMEMBER, None])

        def first_real_then_refused(**kwargs):
            real = next(calls)
            if real is None:
                raise DataError("value too long for type character varying(255)")
            return real(**kwargs)

        with mock.patch.object(fact_services, "fact_remember", side_effect=first_real_then_refused):
            response = self.post(body)
        assert response.status_code == 200, response.content
        first, refused = response.json()
        assert "is_error" not in first
        assert refused["isError"] is True
        assert json.loads(refused["content"][0]["text"]) == error_body("invalid", VALUE_REFUSED)
        assert Fact.objects.filter(workspace=self.workspace, key="first").exists()

    def test_a_programming_error_in_a_tool_is_still_a_500(self):
        """A bug is not the model's to correct: the request fails as any unexpected exception does."""
        client = APIClient(raise_request_exception=False)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.owner_key}")
        with mock.patch.object(fact_services, "fact_remember", side_effect=RuntimeError("a bug")):
            response = self.post(remember_call("first", "toolu_1"), client=client)
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "server_error"


def _mcp_run(**patch):
    request = SimpleNamespace(scope={mcp.PRINCIPAL_SCOPE_KEY: object()})
    ctx = SimpleNamespace(request_context=SimpleNamespace(request=request))
    with mock.patch.object(mcp, "_call", **patch):
        return asyncio.run(mcp._run_tool(ctx, "remember", {}))


def test_mcp_reports_a_refused_value_with_the_same_body():
    """The MCP transport answered this already; it stays the same body as REST's."""
    with pytest.raises(ToolError) as raised:
        _mcp_run(side_effect=DataError("value too long"))
    assert json.loads(str(raised.value)) == error_body("invalid", VALUE_REFUSED)


def test_mcp_unknown_tool_answers_the_apis_unknown_tool_body(mcp_http):
    """REST answers an unknown tool with `unknown_tool`; MCP gave the SDK's plain text
    "Unknown tool: nope", which a client cannot tell apart from other failures."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}
    response = mcp_http_post(mcp_http, body)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    message = TOOL_UNKNOWN.format(name="nope")
    assert json.loads(result["content"][0]["text"]) == error_body(
        "unknown_tool", message, {"name": [message]}
    )


def test_only_tools_that_commit_in_steps_run_outside_a_call_transaction():
    """context, record_turn, store_memory and remember run their own transactions around a
    model call: one transaction over the whole call would hold its locks through that call.
    Reading tools need none and keep their side reads. Every other tool gets its own."""
    from django.db.transaction import Atomic

    from runtime.tool_calls import _call_transaction
    from runtime.tools import TOOLS

    stepped = {spec.name for spec in TOOLS if spec.commits_in_steps}
    assert stepped == {"context", "record_turn", "store_memory", "remember"}
    for spec in TOOLS:
        wrapper = _call_transaction(spec)
        unwrapped = spec.name in stepped or spec.read_only
        assert isinstance(wrapper, Atomic) is not unwrapped, spec.name
