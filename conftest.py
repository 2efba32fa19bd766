import pytest


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters and cached values never leak from one test into the next."""
    from django.core.cache import cache

    cache.clear()
    yield
