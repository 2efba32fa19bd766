"""Request budgets per API key, counted in the shared cache."""

import contextlib
import logging
import math
import time
from types import SimpleNamespace

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)

# While the cache is down every request would log; once a minute says the same.
_WARN_EVERY_SECONDS = 60.0
_last_warning = 0.0


def _window_count(cache, previous_key: str, current_key: str, timeout: int) -> tuple[int, int]:
    """The previous window's count and this window's, after adding this request to it.

    On Valkey / Redis it is one round trip: GET, INCR and EXPIRE in a pipeline. INCR is
    atomic, so every web process's requests are counted. Other backends use Django's
    cache API (LocMemCache increments under its lock).
    """
    if isinstance(cache, RedisCache):
        previous_key = cache.make_and_validate_key(previous_key)
        current_key = cache.make_and_validate_key(current_key)
        pipe = cache._cache.get_client(current_key, write=True).pipeline(transaction=False)
        pipe.get(previous_key)
        pipe.incr(current_key)
        pipe.expire(current_key, timeout)
        previous, current, _ = pipe.execute()
        return int(previous or 0), current
    previous = cache.get(previous_key, 0)
    cache.add(current_key, 0, timeout)
    try:
        current = cache.incr(current_key)
    except ValueError:
        # Expired between add() and incr(): this request opens the window again.
        cache.set(current_key, 1, timeout)
        current = 1
    return previous, current


def _window_release(cache, current_key: str) -> None:
    """Take back the increment of a refused request: refusals do not spend the budget."""
    # Expired meanwhile: nothing left to take back.
    with contextlib.suppress(ValueError):
        cache.decr(current_key)


class ApiKeyRateThrottle(SimpleRateThrottle):
    """A request budget per API key, shared by every web process through the cache.

    The budget is a sliding window estimated from two fixed ones: the requests of this
    window plus those of the previous window, weighted by the share of it that still lies
    within the last `duration` seconds. Each request is one atomic increment, the same
    few bytes whatever the budget. (DRF's SimpleRateThrottle keeps the time of every
    request in the window as one list, read and written back whole on every request:
    at 6,000 a minute that is tens of kilobytes each way, and two processes reading it
    at the same moment each write back a list without the other's request.)

    The budget protects the service; it is not a reason to refuse work. With the cache
    unreachable (the embedded Valkey restarting, a network split) requests are served
    unthrottled and a warning is logged, rather than failing every request with a 500.
    """

    scope = "api_key"

    def get_cache_key(self, request, view):
        api_key = getattr(request, "auth", None)
        if api_key is None:
            return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        return self.cache_format % {"scope": self.scope, "ident": api_key.pk}

    def allow_request(self, request, view):
        global _last_warning
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        try:
            return self._allow(key)
        except (RedisError, OSError) as exc:
            now = time.monotonic()
            if now - _last_warning >= _WARN_EVERY_SECONDS or _last_warning == 0.0:
                _last_warning = now
                logger.warning("request budget not checked, the cache is unreachable: %s", exc)
            return True

    def _allow(self, key: str) -> bool:
        cache = caches[DEFAULT_CACHE_ALIAS]
        now = self.timer()
        window = math.floor(now / self.duration)
        self.elapsed = now - window * self.duration
        current_key = f"{key}:{window}"
        # The previous window must outlive this one.
        self.previous, self.current = _window_count(
            cache, f"{key}:{window - 1}", current_key, 2 * self.duration
        )
        if self.previous * (1 - self.elapsed / self.duration) + self.current <= self.num_requests:
            return True
        _window_release(cache, current_key)
        self.current -= 1
        return False

    def wait(self) -> float:
        """Seconds until one more request fits the budget (the Retry-After of a 429)."""
        limit, duration = self.num_requests, self.duration
        if self.current + 1 <= limit and self.previous:
            # Later in this window the previous window weighs less.
            seconds = duration * (1 - (limit - self.current - 1) / self.previous) - self.elapsed
        else:
            # In the next window this window's requests are the previous ones.
            seconds = duration - self.elapsed
            if self.current:
                seconds += max(0.0, duration * (1 - (limit - 1) / self.current))
        return max(1.0, seconds)


def api_key_budget_wait(api_key) -> float | None:
    """Spend one request of `api_key`'s budget: None when it fits, else the seconds to wait.

    For callers outside DRF that act for a key (the MCP server), so that every route a key
    can use shares the one budget; a cache that cannot be reached admits, as in the API.
    """
    check = ApiKeyRateThrottle()
    if check.allow_request(SimpleNamespace(auth=api_key, META={}), None):
        return None
    return check.wait()
