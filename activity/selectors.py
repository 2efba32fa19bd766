"""Reads of the activity app: one workspace's daily aggregates over a range of days.

Three small queries over the pre-aggregated tables whatever the tiers hold: the cost of the
overview grows with days x metrics x agents, never with the rows of the tiers.
"""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Max, Sum
from django.utils import timezone

from activity.models import DailyCounter, DailyMetric
from activity.services import (
    EMBEDDING_BACKLOG,
    EXTRACTIONS_QUEUED,
    EXTRACTIONS_RUN,
    LLM_JOBS_WAITING,
    TOTAL,
    UTC,
)

# Queued extractions count as waiting for this long; one older was lost, not waiting.
EXTRACTION_BACKLOG_DAYS = 2


@dataclass
class ActivityOverview:
    days: list  # the dates of the range, oldest first
    series: dict = field(default_factory=dict)  # metric -> [workspace-wide value per day]
    totals: dict = field(default_factory=dict)  # tier -> rows on the latest aggregated day
    by_agent: dict = field(default_factory=dict)  # agent id (None: no agent) -> {tier: rows}
    embedding_backlog: dict = field(default_factory=dict)  # tier -> rows without a vector
    extraction_backlog: int = 0
    llm_jobs_waiting: int = 0
    as_of: dt.date | None = None  # the latest day aggregated
    computed_at: dt.datetime | None = None

    def values(self, metric: str) -> list[int]:
        return self.series.get(metric) or [0] * len(self.days)

    def metrics(self, prefix: str) -> list[str]:
        return sorted(metric for metric in self.series if metric.startswith(prefix))


def activity_overview(*, workspace, days: int) -> ActivityOverview:
    """The workspace's last `days` days (UTC, today included) of metrics and counters, and
    its totals per tier and agent on the latest day the aggregation wrote."""
    today = timezone.now().astimezone(UTC).date()
    first = today - dt.timedelta(days=days - 1)
    overview = ActivityOverview(days=[first + dt.timedelta(days=i) for i in range(days)])
    index = {day: i for i, day in enumerate(overview.days)}

    def add(metric, day, value):
        overview.series.setdefault(metric, [0] * days)[index[day]] += value

    metric_rows = (
        DailyMetric.objects.filter(workspace=workspace, day__gte=first, day__lte=today)
        .values("day", "metric")
        .annotate(value=Sum("value"), computed_at=Max("computed_at"))
        .order_by()
    )
    for row in metric_rows:
        add(row["metric"], row["day"], row["value"])
        if overview.as_of is None or row["day"] > overview.as_of:
            overview.as_of = row["day"]
        if overview.computed_at is None or row["computed_at"] > overview.computed_at:
            overview.computed_at = row["computed_at"]
    counter_rows = (
        DailyCounter.objects.filter(workspace=workspace, day__gte=first, day__lte=today)
        .values("day", "metric")
        .annotate(value=Sum("value"))
        .order_by()
    )
    for row in counter_rows:
        add(row["metric"], row["day"], row["value"])

    # Totals of the latest aggregated day, even if older than the range (a stopped beat).
    latest = overview.as_of or (
        DailyMetric.objects.filter(workspace=workspace, metric__startswith=TOTAL)
        .aggregate(day=Max("day"))
        .get("day")
    )
    if latest is not None:
        overview.as_of = latest
        rows = DailyMetric.objects.filter(workspace=workspace, day=latest).values(
            "agent_id", "metric", "value"
        )
        by_agent: dict = defaultdict(lambda: defaultdict(int))
        for row in rows:
            metric = row["metric"]
            if metric.startswith(TOTAL):
                tier = metric.removeprefix(TOTAL)
                by_agent[row["agent_id"]][tier] += row["value"]
                overview.totals[tier] = overview.totals.get(tier, 0) + row["value"]
            elif metric == LLM_JOBS_WAITING:
                overview.llm_jobs_waiting += row["value"]
            elif metric.startswith(EMBEDDING_BACKLOG):
                tier = metric.removeprefix(EMBEDDING_BACKLOG)
                overview.embedding_backlog[tier] = overview.embedding_backlog.get(tier, 0) + row["value"]
        overview.by_agent = {agent: dict(tiers) for agent, tiers in by_agent.items()}

    recent = overview.days[-EXTRACTION_BACKLOG_DAYS:]
    queued = sum(overview.values(EXTRACTIONS_QUEUED)[-len(recent) :])
    run = sum(overview.values(EXTRACTIONS_RUN)[-len(recent) :])
    overview.extraction_backlog = max(0, queued - run)
    return overview
