"""The request budget lives in the shared cache (Valkey); the cache being down must not
turn every API request into a 500."""

import socket
from unittest import mock

from django.test import override_settings

from core.testing import MemoryTestCase


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThrottleCacheDownTests(MemoryTestCase):
    def test_requests_are_served_unthrottled_while_the_cache_is_unreachable(self):
        """Before, redis' ConnectionError escaped the throttle: a JSON 500 on every request."""
        unreachable = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0",
                "OPTIONS": {"socket_connect_timeout": 0.2},
            }
        }
        client = self.api()
        client.raise_request_exception = False
        with (
            override_settings(CACHES=unreachable),
            mock.patch("core.throttling._last_warning", 0.0),
            self.assertLogs("core.throttling", level="WARNING"),
        ):
            response = client.get("/api/v1/agents/")
        assert response.status_code == 200, response.content
