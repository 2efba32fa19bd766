import sys

import pytest


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters and cached values never leak from one test into the next."""
    from django.core.cache import cache

    from core import ranking

    cache.clear()
    # The search's per-process memos (scope and table sizes, BM25 statistics): a count made in
    # one test's rolled-back data would route or weigh the next test's search.
    ranking._scope_sizes.clear()
    ranking._table_sizes.clear()
    ranking._bm25_stats.clear()
    ranking._graph_requests.clear()
    yield


@pytest.fixture(autouse=True)
def _close_context_pool():
    """A test that read a context on the pool (outside a transaction) leaves no pool thread
    holding a database session: the test database could not be dropped at the end."""
    yield
    build = sys.modules.get("runtime.selectors.build")
    if build is not None:
        build.context_pool_close()
