"""The Overview tab, a workspace's landing page: what its memory holds per tier and agent,
how it grew and what happened day by day, the backlogs, LLM tokens against the budget and
the latest changes. Everything is read from pre-aggregated rows (activity/), so the page
costs the same at 1M rows as at 100."""

import uuid

from django.urls import NoReverseMatch, reverse

from activity.services import (
    CREATED,
    ENTRIES_EXTRACTED,
    ENTRIES_REJECTED,
    FACTS_CONFIRMED,
    FACTS_CONTRADICTED,
    RECALLS_CONTEXT,
    RECALLS_RECALL,
    RECALLS_SEARCH,
    TOTAL,
    tier_labels,
)
from browser.access import workspace_view
from browser.lib.charts import bar_chart, line_chart, table_body
from browser.lib.rendering import render_page
from browser.selectors.overview import ENTITY_PAGES, OVERVIEW_RANGES, overview_get
from core.lib.replica import read_replica

RECALL_KINDS = (
    (RECALLS_CONTEXT, "Context assembled"),
    (RECALLS_RECALL, "Recall"),
    (RECALLS_SEARCH, "Episodic search"),
)


def _reason_label(metric: str) -> str:
    return "Rejected: " + metric.removeprefix(ENTRIES_REJECTED).replace("_", " ")


def _charts(data) -> dict:
    activity = data.activity
    days = activity.days
    span = f"the last {len(days)} days (UTC)"
    growth = [
        line_chart(
            chart_id=f"growth-{name}",
            title=f"{label}: {activity.totals.get(name, 0):,}",
            desc=f"{label} held at the end of each day of {span}.",
            days=days,
            series=[(label, activity.values(TOTAL + name))],
            spark=True,
        )
        for name, label in tier_labels()
    ]
    columns = [activity.values(TOTAL + name) for name, _ in tier_labels()]
    growth_rows = table_body(
        [(day.isoformat(), [values[i] for values in columns]) for i, day in enumerate(days)][::-1]
    )
    rejected = activity.metrics(ENTRIES_REJECTED)
    charts = {
        "messages": bar_chart(
            chart_id="messages",
            title="Messages appended",
            desc=f"Messages appended to threads per day over {span}.",
            days=days,
            series=[("Messages", activity.values(CREATED + "messages"))],
        ),
        "entries": bar_chart(
            chart_id="entries",
            title="Episodic entries extracted and rejected",
            desc=f"Entries stored by extraction, and candidates rejected by reason, per day over {span}.",
            days=days,
            series=[("Extracted", activity.values(ENTRIES_EXTRACTED))]
            + [(_reason_label(metric), activity.values(metric)) for metric in rejected],
        ),
        "facts": bar_chart(
            chart_id="facts",
            title="Facts confirmed and contradicted",
            desc="Facts remembered again with the same value (confirmed) or a new one "
            f"(contradicted), per day over {span}.",
            days=days,
            series=[
                ("Confirmed", activity.values(FACTS_CONFIRMED)),
                ("Contradicted", activity.values(FACTS_CONTRADICTED)),
            ],
        ),
        "recalls": bar_chart(
            chart_id="recalls",
            title="Recalls served",
            desc=f"Context assemblies, recalls and episodic searches served per day over {span}.",
            days=days,
            series=[(label, activity.values(metric)) for metric, label in RECALL_KINDS],
        ),
    }
    llm_chart = None
    if data.llm is not None:
        llm_chart = bar_chart(
            chart_id="llm",
            title="LLM tokens per day",
            desc=f"Tokens of LLM work per day and purpose over {span}"
            + (f", against a budget of {data.llm.budget:,} a day." if data.llm.budget else "."),
            days=data.llm.days,
            series=sorted(data.llm.by_purpose.items()),
            limit=data.llm.budget,
        )
    return {"growth": growth, "growth_rows": growth_rows, "charts": charts, "llm_chart": llm_chart}


def _counts(data) -> dict:
    """Rows per tier for each agent, workspace-wide rows (no agent) last."""
    activity = data.activity
    tiers = [(name, label) for name, label in tier_labels() if name in activity.totals]
    rows = [
        (data.agents.get(agent_id, "(deleted agent)"), [counts.get(name, 0) for name, _ in tiers])
        for agent_id, counts in activity.by_agent.items()
        if agent_id is not None
    ]
    rows.sort()
    if None in activity.by_agent:
        rows.append(("No agent", [activity.by_agent[None].get(name, 0) for name, _ in tiers]))
    return {"tiers": tiers, "rows": rows, "totals": [activity.totals.get(name, 0) for name, _ in tiers]}


def _changes(request, data) -> list[dict]:
    """The latest audit events, each linked to its row's page while the row may still exist."""
    workspace_id = request.operator.workspace.pk
    changes = []
    for event in data.changes:
        url = ""
        page = ENTITY_PAGES.get(event.entity_type)
        if page and event.action not in ("delete", "erase", "merge"):
            try:
                url = reverse(page, kwargs={"workspace_id": workspace_id, "pk": uuid.UUID(event.entity_id)})
            except (ValueError, NoReverseMatch):
                url = ""
        changes.append({"event": event, "url": url, "entity": event.entity_type.replace("_", " ")})
    return changes


@read_replica
@workspace_view()
def overview(request):
    try:
        days = int(request.GET.get("days", OVERVIEW_RANGES[0]))
    except ValueError:
        days = OVERVIEW_RANGES[0]
    if days not in OVERVIEW_RANGES:
        days = OVERVIEW_RANGES[0]
    data = overview_get(workspace=request.operator.workspace, days=days)
    context = {
        "tab": "overview",
        "days": days,
        "ranges": sorted(OVERVIEW_RANGES),
        "activity": data.activity,
        "llm": data.llm,
        "counts": _counts(data),
        "backlog": [
            (label, data.activity.embedding_backlog.get(name, 0))
            for name, label in tier_labels()
            if name in data.activity.embedding_backlog
        ],
        "changes": _changes(request, data),
        **_charts(data),
    }
    return render_page(request, "memories/overview.html", context, partials={"main": "overview-panel"})
