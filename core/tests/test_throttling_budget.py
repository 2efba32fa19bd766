"""The per-key budget as a client meets it: the 429 body, Retry-After, one budget per key, and
the same budget whichever route the key takes (REST or MCP)."""

from types import SimpleNamespace
from unittest import mock

from django.core.cache import caches
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient

from core.access import principal_for_api_key
from core.testing import MemoryTestCase
from core.throttling import ApiKeyRateThrottle, api_key_budget_wait

AGENTS_URL = "/api/v1/agents/"


def budget(rate: str):
    return mock.patch.object(ApiKeyRateThrottle, "THROTTLE_RATES", {"api_key": rate})


class ThrottleResponseTests(MemoryTestCase):
    def setUp(self):
        caches["default"].clear()
        self.addCleanup(caches["default"].clear)

    def test_past_the_budget_a_429_with_the_error_body_and_retry_after(self):
        with budget("2/min"):
            client = self.api()
            assert [client.get(AGENTS_URL).status_code for _ in range(2)] == [200, 200]
            response = client.get(AGENTS_URL)
            # Another key has its own budget.
            other = self.api(self.read_only_key).get(AGENTS_URL)
        assert response.status_code == 429
        assert response.json()["error"]["code"] == "throttled"
        assert 1 <= int(response["Retry-After"]) <= 120
        assert other.status_code == 200

    def test_the_budget_helper_spends_the_same_budget_as_the_api(self):
        with budget("2/min"):
            assert self.api().get(AGENTS_URL).status_code == 200
            assert api_key_budget_wait(self.owner_api_key) is None
            wait = api_key_budget_wait(self.owner_api_key)
            assert wait is not None and wait >= 1
            assert self.api().get(AGENTS_URL).status_code == 429
            assert api_key_budget_wait(self.agent_api_key) is None


async def _reached(scope, receive, send):
    await PlainTextResponse("reached")(scope, receive, send)


class McpBudgetTests(MemoryTestCase):
    def setUp(self):
        caches["default"].clear()
        self.addCleanup(caches["default"].clear)

    def test_mcp_requests_spend_the_keys_budget(self):
        from runtime import mcp

        principal = principal_for_api_key(self.owner_api_key)
        client = TestClient(mcp.ApiKeyMiddleware(_reached), raise_server_exceptions=False)
        with budget("2/min"), mock.patch.object(mcp, "_principal_for_secret", return_value=principal):
            responses = [
                client.post(mcp.MCP_PATH, headers={"Authorization": f"Bearer {self.owner_key}"})
                for _ in range(3)
            ]
        assert [response.status_code for response in responses] == [200, 200, 429]
        assert responses[2].json()["error"]["code"] == "throttled"
        assert int(responses[2].headers["Retry-After"]) >= 1


def test_helper_admits_when_the_cache_is_unreachable():
    with mock.patch("core.throttling.ApiKeyRateThrottle._allow", side_effect=OSError("refused")):
        assert api_key_budget_wait(SimpleNamespace(pk="k")) is None
