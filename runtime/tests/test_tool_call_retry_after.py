"""A tool call the database failed transiently says so: its error body carries `retryable`
and `retry_after`, and the HTTP response a Retry-After header, on REST and on MCP. Answered
as a 200 holding that call's error, it had lost the back-off the API's 503 gives."""

import dataclasses
import json
from unittest import mock

import psycopg
from django.db import DataError, OperationalError

from core.errors import RETRY_AFTER_SECONDS, SERVICE_UNAVAILABLE, VALUE_REFUSED, error_body
from core.testing import MemoryTestCase
from facts import services as fact_services
from facts.models import Fact
from runtime import tools
from runtime.testing import mcp_http_post

URL = "/api/v1/tools/call/"
REAL_FACT_REMEMBER = fact_services.fact_remember


def _deadlock() -> OperationalError:
    error = OperationalError("deadlock detected")
    error.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return error


def _lock_timeout() -> OperationalError:
    error = OperationalError("canceling statement due to lock timeout")
    error.__cause__ = psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    return error


def remember_call(key, call_id):
    return {"type": "tool_use", "id": call_id, "name": "remember", "input": {"key": key, "value": "v"}}


def failing_for(key, exc):
    def fact_remember(**kwargs):
        if kwargs["key"] == key:
            raise exc
        return REAL_FACT_REMEMBER(**kwargs)

    return fact_remember


class ToolCallTransientFailureTests(MemoryTestCase):
    def post(self, body):
        return self.api().post(URL, body, format="json")

    def test_an_unreachable_database_is_a_retryable_result_with_retry_after(self):
        with mock.patch.object(
            fact_services,
            "fact_remember",
            side_effect=failing_for("k", OperationalError("connection refused")),
        ):
            response = self.post(remember_call("k", "toolu_1"))
        assert response.status_code == 200, response.content
        assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
        error = json.loads(response.json()["content"])["error"]
        assert error == {
            "code": "service_unavailable",
            "message": SERVICE_UNAVAILABLE,
            "fields": {},
            "retryable": True,
            "retry_after": RETRY_AFTER_SECONDS,
        }

    def test_a_deadlock_in_one_call_of_a_list_sets_retry_after_for_the_response(self):
        """The other calls still answer (and the first one committed); only the deadlocked
        call is marked retryable, and the response carries Retry-After."""
        body = [
            remember_call("first", "toolu_1"),
            remember_call("dead", "toolu_2"),
            remember_call("third", "toolu_3"),
        ]
        with mock.patch.object(fact_services, "fact_remember", side_effect=failing_for("dead", _deadlock())):
            response = self.post(body)
        assert response.status_code == 200, response.content
        assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
        first, dead, third = response.json()
        assert "is_error" not in first and "is_error" not in third
        error = json.loads(dead["content"])["error"]
        assert error["retryable"] is True and error["retry_after"] == RETRY_AFTER_SECONDS
        assert set(Fact.objects.filter(workspace=self.workspace).values_list("key", flat=True)) == {
            "first",
            "third",
        }

    def test_a_refused_value_is_not_retryable(self):
        """A value the database refuses fails again when repeated: no Retry-After, no retry_after."""
        with mock.patch.object(
            fact_services, "fact_remember", side_effect=failing_for("k", DataError("too long"))
        ):
            response = self.post(remember_call("k", "toolu_1"))
        assert response.status_code == 200, response.content
        assert "Retry-After" not in response.headers
        assert json.loads(response.json()["content"]) == error_body("invalid", VALUE_REFUSED)

    def test_a_successful_call_has_no_retry_after(self):
        response = self.post(remember_call("k", "toolu_1"))
        assert response.status_code == 200, response.content
        assert "Retry-After" not in response.headers


def _call_recall_failing(client, exc):
    def recall(**kwargs):
        raise exc

    specs = [dataclasses.replace(spec, fn=recall) if spec.name == "recall" else spec for spec in tools.TOOLS]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", "arguments": {}}}
    with mock.patch.object(tools, "TOOLS", specs):
        return mcp_http_post(client, body)


def _text_body(result) -> dict:
    """The API's error body, which the SDK prefixes with "Error executing tool <name>: "."""
    text = result["content"][0]["text"]
    return json.loads(text[text.index("{") :])


def test_mcp_a_lock_timeout_is_a_retryable_result_with_retry_after(mcp_http):
    response = _call_recall_failing(mcp_http, _lock_timeout())
    assert response.status_code == 200, response.text
    assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
    result = response.json()["result"]
    assert result["isError"] is True
    error = _text_body(result)["error"]
    assert error["code"] == "database_timeout"
    assert error["retryable"] is True and error["retry_after"] == RETRY_AFTER_SECONDS


def test_mcp_a_refused_value_has_no_retry_after(mcp_http):
    response = _call_recall_failing(mcp_http, DataError("too long"))
    assert response.status_code == 200, response.text
    assert "Retry-After" not in response.headers
    result = response.json()["result"]
    assert _text_body(result) == error_body("invalid", VALUE_REFUSED)
