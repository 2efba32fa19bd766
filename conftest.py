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
def _close_side_reads():
    """A test that read beside the request (outside a transaction) leaves no pool thread
    holding a database session: the test database could not be dropped at the end."""
    yield
    side_reads = sys.modules.get("core.lib.side_reads")
    if side_reads is not None:
        side_reads.side_reads_close()
