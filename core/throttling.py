"""Request budgets per API key, counted in the shared cache."""

import logging
import time

from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)

# While the cache is down every request would log; once a minute says the same.
_WARN_EVERY_SECONDS = 60.0
_last_warning = 0.0


class ApiKeyRateThrottle(SimpleRateThrottle):
    """A request budget per API key, shared by every web process through the cache.

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
        try:
            return super().allow_request(request, view)
        except (RedisError, OSError) as exc:
            now = time.monotonic()
            if now - _last_warning >= _WARN_EVERY_SECONDS or _last_warning == 0.0:
                _last_warning = now
                logger.warning("request budget not checked, the cache is unreachable: %s", exc)
            return True
