"""Reads beside the request: a few threads per process, each with its own database connection.

A request that has two independent reads to make sends one on a pool thread while its own
thread sends the other, so PostgreSQL works on both at once (on two backends, two cores):
the context build reads its episodic search and history window there while it builds the
other blocks (runtime.selectors.build), and a search of a large scope sends its BM25 there
while it finds its vector candidates (core.ranking.hybrid_search).

- Rows written in an open transaction (a caller's atomic block, a `TestCase`) are invisible
  to the pool's connections, so inside one nothing is read beside (`side_reads_enabled`).
- A read that finds no free pool thread (other requests hold them) is not queued: the
  caller runs it itself (`side_read_started` returns None), as it would with no pool.
- SIDE_READ_THREADS threads, made again in a forked child (an inherited pool has no threads).
  Each keeps its connection across requests under CONN_MAX_AGE and the health check, as
  request threads do; `side_reads_close` ends them and their sessions.
"""

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

_executor: ThreadPoolExecutor | None = None
_slots: threading.Semaphore | None = None
_workers = 0
_pid = 0
_lock = threading.Lock()

THREAD_PREFIX = "side-read"


def side_reads_enabled() -> bool:
    """Whether a read may go to the pool now: a pool is configured and the caller's connection
    is not inside a transaction, whose uncommitted rows another connection would not see."""
    from django.conf import settings
    from django.db import connection

    return settings.SIDE_READ_THREADS > 0 and not connection.in_atomic_block


def _pool() -> tuple[ThreadPoolExecutor, threading.Semaphore]:
    global _executor, _slots, _workers, _pid
    from django.conf import settings

    with _lock:
        if _executor is None or _pid != os.getpid():
            _workers = settings.SIDE_READ_THREADS
            _executor = ThreadPoolExecutor(max_workers=_workers, thread_name_prefix=THREAD_PREFIX)
            _slots = threading.Semaphore(_workers)
            _pid = os.getpid()
        return _executor, _slots


def side_pool_slots() -> threading.Semaphore:
    """The pool's free-thread count (tests take every slot to show that nothing queues)."""
    return _pool()[1]


def side_read_started(fn, /, **kwargs) -> Future | None:
    """`fn(**kwargs)` running on a pool thread, or None when no pool thread is free (the caller
    then runs it itself). The future's result is `(fn's result, milliseconds it took)`; it
    raises what `fn` raises."""
    executor, slots = _pool()
    if not slots.acquire(blocking=False):
        return None
    try:
        return executor.submit(_in_pool_thread, fn, kwargs, slots)
    except BaseException:
        slots.release()
        raise


def _in_pool_thread(fn, kwargs, slots):
    from django.db import close_old_connections

    try:
        # Pool threads keep one connection each across requests; this applies CONN_MAX_AGE
        # and the health check the request cycle applies to request threads.
        close_old_connections()
        started = time.perf_counter()
        return fn(**kwargs), round((time.perf_counter() - started) * 1000, 3)
    finally:
        slots.release()


def side_reads_close() -> None:
    """End the pool, each thread closing its database connection first.

    A test run that used the pool calls this before the test database is dropped, which
    fails while a session is open.
    """
    global _executor, _slots
    with _lock:
        executor, workers, pid = _executor, _workers, _pid
        _executor, _slots = None, None
    if executor is None or pid != os.getpid():
        return
    # One task per thread: each waits at the barrier until all are running, so no thread
    # takes two and every thread closes its own connection (a connection is per thread).
    barrier = threading.Barrier(workers)

    def close():
        from django.db import connections

        try:
            barrier.wait(timeout=10)
        except threading.BrokenBarrierError:
            pass
        finally:
            connections.close_all()

    for _ in range(workers):
        executor.submit(close)
    executor.shutdown(wait=True)
