"""Reads of the overview page: the activity aggregates, the agents that name them, the
latest changes of the audit trail and, once core keeps it, the LLM usage against the budget."""

import datetime as dt
from dataclasses import dataclass

from django.db.models import Sum

from activity.selectors import ActivityOverview, activity_overview
from core.models import Agent, AuditEvent

# The overview's ranges in days; the first is the default.
OVERVIEW_RANGES = (30, 7, 90)
RECENT_CHANGES = 20

# The row of each audited entity type in the browser (URL names of memories:<name>).
ENTITY_PAGES = {
    "fact": "memories:fact",
    "episode": "memories:episode",
    "episodic_entry": "memories:entry",
    "procedure": "memories:procedure",
    "memory_user": "memories:user",
    "thread": "memories:thread",
    "store_item": "memories:store-item",
    "checkpoint": "memories:checkpoint",
}


@dataclass
class LlmUsage:
    days: list  # dates, oldest first
    by_purpose: dict  # purpose -> [total tokens per day]
    today: int
    budget: int | None  # tokens per day; None: no budget
    policy: str

    @property
    def percent(self) -> int | None:
        if not self.budget:
            return None
        return min(100, round(100 * self.today / self.budget))


@dataclass
class WorkspaceOverview:
    activity: ActivityOverview
    agents: dict  # agent id -> slug
    changes: list  # AuditEvent, newest first
    llm: LlmUsage | None


def overview_get(*, workspace, days: int) -> WorkspaceOverview:
    return WorkspaceOverview(
        activity=activity_overview(workspace=workspace, days=days),
        agents=dict(Agent.objects.filter(workspace=workspace).values_list("pk", "slug")),
        changes=list(AuditEvent.objects.filter(workspace=workspace).order_by("-at", "-id")[:RECENT_CHANGES]),
        llm=llm_usage_get(workspace=workspace, days_list=activity_days(days)),
    )


def activity_days(days: int) -> list[dt.date]:
    from django.utils import timezone

    today = timezone.now().astimezone(dt.UTC).date()
    return [today - dt.timedelta(days=days - 1 - i) for i in range(days)]


def llm_usage_get(*, workspace, days_list) -> LlmUsage | None:
    """Tokens per day from core's LLM usage ledger; None where that ledger does not exist."""
    try:
        from core.models import LLMUsage
    except ImportError:
        return None
    from core.lib.llm_budget import llm_budget_settings

    index = {day: i for i, day in enumerate(days_list)}
    rows = (
        LLMUsage.objects.filter(workspace=workspace, day__gte=days_list[0], day__lte=days_list[-1])
        .values("day", "purpose")
        .annotate(tokens=Sum("total_tokens"))
        .order_by("purpose")
    )
    by_purpose: dict = {}
    for row in rows:
        by_purpose.setdefault(row["purpose"], [0] * len(days_list))[index[row["day"]]] += row["tokens"] or 0
    today = sum(values[-1] for values in by_purpose.values())
    budget, policy = llm_budget_settings(workspace=workspace)
    return LlmUsage(days=days_list, by_purpose=by_purpose, today=today, budget=budget, policy=policy)
