"""Per-day event counters for what leaves no row behind to count later.

A recall served or an extraction candidate rejected writes nothing of its own, so the
overview could not count it afterwards. Tiers call `counters_add`; an app above core
(activity) registers the sink that stores the counts in its `AppConfig.ready()`, as the
audit listeners of core.events do. Without a sink the call costs nothing.

Counts are taken after the caller's transaction commits, so counts of a rolled-back write
are never stored, and the sink's upsert never holds a lock inside a caller's transaction.

- Inside a request, the counts join those of the process's other requests, and one thread
  stores them every COUNTERS_FLUSH_SECONDS: one upsert a second for every search and recall
  the process served, not one each. An upsert written after each response (as before) still
  held the request's thread and connection, and so the next request of a keep-alive
  client, for about 8% of a search's time in the web process (docs/speed.md). The counts
  of the last second are written when the process exits normally; a killed process loses
  them, never a memory. With COUNTERS_FLUSH_SECONDS = 0 they are written after each
  response (`core.lib.after_response`).
- Outside a request (a task, a command) they are written at once.

A failing sink is logged and never fails the caller.
"""

import atexit
import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.utils import timezone

from core.lib.after_response import after_response, after_response_queueing

logger = logging.getLogger(__name__)

# The metrics counted, by the path that serves them.
RECALLS_CONTEXT = "recalls.context"  # POST /context/ and the context tool
RECALLS_RECALL = "recalls.recall"  # POST /recall/ and the recall tool
RECALLS_SEARCH = "recalls.search"  # POST /entries/search/ and the episodic search tools
ENTRIES_REJECTED = "entries.rejected."  # + the rejected candidate's reason
EXTRACTIONS_QUEUED = "extractions.queued"  # extraction tasks enqueued
EXTRACTIONS_RUN = "extractions.run"  # extraction tasks that ran

_sink: Callable[..., None] | None = None


def counter_sink_register(sink: Callable[..., None] | None) -> None:
    """Store counts with `sink(workspace_id=, agent_id=, counts=, day=)`; None unregisters."""
    global _sink
    _sink = sink


def counters_add(*, workspace_id, agent_id=None, counts: dict[str, int]) -> None:
    """Add `counts` ({metric: n}) to today's counters of the workspace (and agent)."""
    sink = _sink
    counts = {metric: n for metric, n in counts.items() if n}
    if sink is None or not counts:
        return
    transaction.on_commit(lambda: _count(sink, workspace_id, agent_id, counts))


def recall_served(*, context, metric: str) -> None:
    """Count one recall of `metric` served to a MemoryContext (workspace, maybe an agent)."""
    agent = context.agent
    counters_add(workspace_id=context.workspace.pk, agent_id=agent.pk if agent else None, counts={metric: 1})


def rejections_count(*, workspace_id, agent_id, rejected: list[dict]) -> None:
    """Count an extraction's rejected candidates by reason."""
    counts: dict[str, int] = {}
    for item in rejected:
        metric = ENTRIES_REJECTED + str(item.get("reason") or "unknown")
        counts[metric] = counts.get(metric, 0) + 1
    counters_add(workspace_id=workspace_id, agent_id=agent_id, counts=counts)


def counters_flush() -> None:
    """Store the counts this process holds now (also run at the process's normal exit)."""
    _held.flush()


def _count(sink, workspace_id, agent_id, counts: dict[str, int]) -> None:
    day = timezone.now().astimezone(dt.UTC).date()
    if settings.COUNTERS_FLUSH_SECONDS > 0 and after_response_queueing():
        _held.add(sink, workspace_id, agent_id, day, counts)
    else:
        after_response(lambda: _store(sink, workspace_id, agent_id, day, counts))


def _store(sink, workspace_id, agent_id, day, counts) -> None:
    try:
        sink(workspace_id=workspace_id, agent_id=agent_id, counts=counts, day=day)
    except Exception:
        logger.exception("Counting %s for workspace %s failed", sorted(counts), workspace_id)


# Seconds the storing thread keeps its database connection with nothing to store.
_IDLE_CLOSE_SECONDS = 30.0


class _HeldCounts:
    """The counts of this process's requests not yet stored, and the thread that stores them.

    A forked process (a web worker) starts with none: those its parent held are the
    parent's to store, and the parent's thread does not exist in the child."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._counts: dict[tuple, dict[str, int]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, sink, workspace_id, agent_id, day: dt.date, counts: dict[str, int]) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._counts, self._thread = os.getpid(), {}, None
                self._wake = threading.Event()
            held = self._counts.setdefault((sink, workspace_id, agent_id, day), {})
            for metric, n in counts.items():
                held[metric] = held.get(metric, 0) + n
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="counters", daemon=True)
                self._thread.start()
            self._wake.set()

    def flush(self) -> None:
        with self._lock:
            if self._pid != os.getpid():
                return
            counts, self._counts = self._counts, {}
        for (sink, workspace_id, agent_id, day), metrics in counts.items():
            _store(sink, workspace_id, agent_id, day, metrics)

    def _run(self) -> None:
        wake = self._wake
        while True:
            if not wake.wait(timeout=_IDLE_CLOSE_SECONDS):
                # Nothing to store for a while: the thread's connection is not kept open.
                connections.close_all()
                wake.wait()
            # The counts of the next interval are gathered, then stored in one upsert each.
            time.sleep(settings.COUNTERS_FLUSH_SECONDS)
            wake.clear()
            # Around each store what Django does around a request: a connection that failed
            # is closed, and one the server ended meanwhile is checked before it is used.
            close_old_connections()
            self.flush()
            close_old_connections()


_held = _HeldCounts()
atexit.register(counters_flush)
