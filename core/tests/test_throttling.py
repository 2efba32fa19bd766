"""The per-key request budget: a sliding window over two fixed ones, one atomic increment per
request (core/throttling.py)."""

import shutil
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.cache import caches
from django.test import SimpleTestCase, override_settings

from core.lib.embedded import EmbeddedValkey
from core.throttling import ApiKeyRateThrottle

MINUTE = 60.0
# The middle of a window: far from its edges, whatever the test does in between.
START = 1_000 * MINUTE + 30


def throttle(rate: str, now: float) -> ApiKeyRateThrottle:
    check = ApiKeyRateThrottle()
    check.rate = rate
    check.num_requests, check.duration = check.parse_rate(rate)
    check.timer = lambda: now
    return check


def request_of(key_id="key-1"):
    return SimpleNamespace(auth=SimpleNamespace(pk=key_id), META={"REMOTE_ADDR": "127.0.0.1"})


def admitted(rate: str, now: float, count: int, key_id="key-1") -> int:
    return sum(throttle(rate, now).allow_request(request_of(key_id), None) for _ in range(count))


class SlidingWindowTests(SimpleTestCase):
    def setUp(self):
        caches["default"].clear()

    def test_the_budget_is_spent_and_a_refusal_says_when_to_come_back(self):
        assert admitted("10/min", START, 10) == 10
        refused = throttle("10/min", START)
        assert refused.allow_request(request_of(), None) is False
        # Half the window is left, and the next one starts with these 10 weighing in full.
        assert 30 <= refused.wait() <= MINUTE + 30

    def test_refused_requests_do_not_spend_the_budget(self):
        assert admitted("10/min", START, 25) == 10
        # Next window, at its middle: the previous window's 10 weigh half, 5 fit.
        assert admitted("10/min", START + MINUTE, 10) == 5

    def test_the_previous_window_weighs_by_the_share_of_it_still_inside_the_last_minute(self):
        window_start = START - 30
        assert admitted("10/min", window_start + 59, 10) == 10
        # 1 s into the next window 59/60 of the previous one still counts: nothing fits.
        assert admitted("10/min", window_start + 61, 5) == 0
        # 45 s in, a quarter of it counts: 10 - 2.5 leaves 7.
        assert admitted("10/min", window_start + 105, 10) == 7
        # Two windows on, the budget is whole again.
        assert admitted("10/min", window_start + 180, 12) == 10

    def test_each_key_has_its_own_budget(self):
        assert admitted("3/min", START, 5, key_id="a") == 3
        assert admitted("3/min", START, 5, key_id="b") == 3

    def test_the_wait_is_when_the_previous_window_has_weighed_off_enough_and_at_least_a_second(self):
        window_start = START - 30
        assert admitted("10/min", window_start, 10) == 10
        early = throttle("10/min", window_start + 60 + 3)
        assert early.allow_request(request_of(), None) is False
        # 10 x (1 - t / 60) + 1 <= 10 from t = 6 s on.
        assert early.wait() == pytest.approx(3.0)
        almost = throttle("10/min", window_start + 60 + 5.9)
        assert almost.allow_request(request_of(), None) is False
        assert almost.wait() == 1.0


@pytest.mark.slow
class SharedCacheTests(SimpleTestCase):
    """On the embedded Valkey the web processes share: each request is one INCR, so requests
    arriving together are all counted."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = Path(tempfile.mkdtemp(prefix="memory-test-throttle-"))
        cls.valkey = EmbeddedValkey(cls.root, cls.root / "v.sock")
        cls.valkey.start()
        cls.caches = override_settings(
            CACHES={
                "default": {
                    "BACKEND": "django.core.cache.backends.redis.RedisCache",
                    "LOCATION": f"unix://{cls.valkey.socket_path}",
                }
            }
        )
        cls.caches.enable()

    @classmethod
    def tearDownClass(cls):
        cls.caches.disable()
        cls.valkey.stop()
        shutil.rmtree(cls.root, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        caches["default"].clear()

    def test_requests_arriving_at_once_from_many_threads_are_all_counted(self):
        allowed = []

        def client():
            allowed.append(admitted("100/min", START, 40))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(allowed) == 100

    def test_the_count_is_a_number_that_expires_not_a_list_of_times(self):
        assert admitted("1000/min", START, 300) == 300
        cache = caches["default"]
        key = cache.make_and_validate_key(f"throttle_api_key_key-1:{int(START // MINUTE)}")
        client = cache._cache.get_client(key)
        assert client.get(key) == b"300"
        assert 0 < client.ttl(key) <= 2 * MINUTE
        # Django's cache API reads the same count.
        assert cache.get(f"throttle_api_key_key-1:{int(START // MINUTE)}") == 300
