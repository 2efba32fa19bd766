import sys

import pytest


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters and cached values never leak from one test into the next."""
    from django.core.cache import cache

    from core import ranking

    cache.clear()
    # The search's per-process memo of scope and table sizes and BM25 statistics: a count made in one test's
    # rolled-back data would route the next test's plan.
    ranking._scope_sizes.clear()
    ranking._table_sizes.clear()
    ranking._bm25_stats.clear()
    yield


@pytest.fixture(autouse=True)
def _close_context_pool():
    """A test that read a context on the pool (outside a transaction) leaves no pool thread
    holding a database session: the test database could not be dropped at the end."""
    yield
    build = sys.modules.get("runtime.selectors.build")
    if build is not None:
        build.context_pool_close()
