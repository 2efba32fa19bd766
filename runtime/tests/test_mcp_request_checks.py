"""A JSON-RPC request whose id is no MCP id (an object, an array, a bool, a number with a
fraction part, null; MCP's RequestId is a string or an integer) is answered
with Invalid Request (-32600, id null) over MCP's streamable HTTP; the SDK read it as a
notification and answered 202 with no body, so the client waited for nothing. A body over the
API's limit is its 413, before the SDK reads it whole."""

import pytest
from starlette.testclient import TestClient

from runtime import mcp
from runtime.testing import mcp_http_post


@pytest.mark.parametrize("request_id", [{"a": 1}, [1], True, False, 1.5, 7.0, None])
def test_a_request_with_an_invalid_id_gets_invalid_request(mcp_http, request_id):
    response = mcp_http_post(mcp_http, {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert body["error"]["message"] == mcp.REQUEST_ID_INVALID


@pytest.mark.parametrize("request_id", [7, "req-7"])
def test_a_request_with_a_valid_id_is_answered_with_that_id(mcp_http, request_id):
    response = mcp_http_post(mcp_http, {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == request_id
    assert "recall" in {tool["name"] for tool in body["result"]["tools"]}


def test_a_notification_is_still_accepted_without_an_answer(mcp_http):
    response = mcp_http_post(mcp_http, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202, response.text
    assert response.content == b""


def test_the_key_is_checked_before_the_body():
    """Without a key the answer is the API's 401, whatever the body holds."""
    client = TestClient(mcp.mcp_app(), base_url="http://127.0.0.1:8765")
    response = client.post(mcp.MCP_PATH, json={"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_a_body_over_the_limit_is_a_413_and_never_reaches_the_sdk(mcp_http, settings):
    settings.API_MAX_BODY_BYTES = 2_000
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * 5_000}}
    response = mcp_http_post(mcp_http, body)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"
    assert "2000 bytes" in response.json()["error"]["message"]
