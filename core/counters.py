"""Per-day event counters for what leaves no row behind to count later.

A recall served or an extraction candidate rejected writes nothing of its own, so the
overview could not count it afterwards. Tiers call `counters_add`; an app above core
(activity) registers the sink that stores the counts in its `AppConfig.ready()`, as the
audit listeners of core.events do. Without a sink the call costs nothing.

The sink runs after the caller's transaction commits (at once outside one), so its one-row
upsert never holds a lock inside a request's transaction, and counts of a rolled-back
write are never stored; inside a request, after the response has been sent
(`core.lib.after_response`), so a recall's answer does not wait for its own count. A
failing sink is logged and never fails the caller.
"""

import logging
from collections.abc import Callable

from django.db import transaction

from core.lib.after_response import after_response

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
    """Store counts with `sink(workspace_id=, agent_id=, counts=)`; None unregisters."""
    global _sink
    _sink = sink


def counters_add(*, workspace_id, agent_id=None, counts: dict[str, int]) -> None:
    """Add `counts` ({metric: n}) to today's counters of the workspace (and agent)."""
    sink = _sink
    counts = {metric: n for metric, n in counts.items() if n}
    if sink is None or not counts:
        return
    transaction.on_commit(lambda: after_response(lambda: _store(sink, workspace_id, agent_id, counts)))


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


def _store(sink, workspace_id, agent_id, counts) -> None:
    try:
        sink(workspace_id=workspace_id, agent_id=agent_id, counts=counts)
    except Exception:
        logger.exception("Counting %s for workspace %s failed", sorted(counts), workspace_id)
