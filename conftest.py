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


@pytest.fixture(autouse=True)
def _celery_join_allowed():
    """Each test starts with Celery's "would a join block" flag off, as a process outside a
    worker has it.

    Eager `apply_async` sets the flag for its run and restores what it found, in one global,
    not per thread: two threads of a race test running eager tasks at once can restore it in
    the wrong order and leave it on, and every later `EagerResult.get()` in that process then
    raises "Never call result.get() within a task!".
    """
    from celery._state import _set_task_join_will_block

    _set_task_join_will_block(False)
    yield
