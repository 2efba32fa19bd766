"""Writes of the activity app: event counters, and the daily aggregates recomputed from the tiers.

`activity_aggregate` recomputes whole days (by default yesterday and today), so running it
again, or after a crash, only rewrites the same rows: it is idempotent. Each run scans every
tier's table once (totals and the days' creations in one GROUP BY), which is why it runs in
a periodic task and never per page view.
"""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models import Case, Count, DateField, Exists, F, OuterRef, Q, When
from django.db.models.functions import TruncDate
from django.utils import timezone

from activity.models import DailyCounter, DailyMetric
from core.counters import (  # noqa: F401  (re-exported: the metrics counted as events)
    ENTRIES_REJECTED,
    EXTRACTIONS_QUEUED,
    EXTRACTIONS_RUN,
    RECALLS_CONTEXT,
    RECALLS_RECALL,
    RECALLS_SEARCH,
)
from core.memory_settings import memory_settings_for
from core.models import Agent, AuditEvent, LLMJob, Workspace

UTC = dt.UTC

# Metrics recomputed from rows.
CREATED = "created."  # + tier: rows of the tier created that day that still exist
TOTAL = "total."  # + tier: rows that exist now and were created by the day's end
ENTRIES_EXTRACTED = "entries.extracted"
FACTS_CONFIRMED = "facts.confirmed"
FACTS_CONTRADICTED = "facts.contradicted"
EMBEDDING_BACKLOG = "backlog.embedding."  # + tier, on today's row only
LLM_JOBS_WAITING = "backlog.llm_jobs"  # LLM work queued or sent and not done, on today's row

# One advisory lock key for every aggregation: two runs (beat and a backfill) would otherwise
# delete each other's fresh rows and collide on the unique constraint.
AGGREGATE_LOCK = 0x61637476  # "actv"


# The tiers the overview counts, in display order.
TIER_LABELS = (
    ("messages", "Messages"),
    ("threads", "Threads"),
    ("facts", "Facts"),
    ("entries", "Episodic entries"),
    ("episodes", "Episodes"),
    ("procedures", "Procedures"),
    ("checkpoints", "Checkpoints"),
    ("store", "Store items"),
    ("users", "Memory users"),
)


def tier_labels() -> tuple:
    return TIER_LABELS


@dataclass(frozen=True)
class Tier:
    name: str
    queryset: object  # callable returning the rows the tier holds now
    agent: str | None  # the path to the row's agent id, None when rows have no agent


def _tiers() -> list[Tier]:
    from checkpoints.models import Checkpoint
    from episodes.models import Episode
    from episodic.models import EpisodicEntry
    from facts.models import Fact
    from identities.models import MemoryUser
    from procedures.models import Procedure
    from store.models import StoreItem
    from threads.models import Message, Thread

    return [
        Tier("messages", lambda: Message.objects.all(), "thread__agent_id"),
        Tier("threads", lambda: Thread.objects.all(), "agent_id"),
        Tier("facts", lambda: Fact.objects.filter(valid_to__isnull=True), "agent_id"),
        Tier(
            "entries",
            lambda: EpisodicEntry.objects.filter(status=EpisodicEntry.Status.ACTIVE),
            "agent_id",
        ),
        Tier("episodes", lambda: Episode.objects.all(), "agent_id"),
        Tier("procedures", lambda: Procedure.objects.all(), "agent_id"),
        Tier("checkpoints", lambda: Checkpoint.objects.all(), "thread__agent_id"),
        Tier("store", lambda: StoreItem.objects.all(), "agent_id"),
        Tier("users", lambda: MemoryUser.objects.all(), None),
    ]


def counters_store(
    *, workspace_id, agent_id=None, counts: dict[str, int], day: dt.date | None = None
) -> None:
    """Add `counts` to the day's counter rows in one upsert (core.counters' sink).

    Raw SQL on the primary's connection: through the ORM the read-replica router would take
    the write for the request's own and pin its caller to the primary.

    Run on its own (after the caller's commit), the upsert's commit does not wait for its
    WAL to reach the disk (`synchronous_commit` off for that transaction alone). Every
    search and recall counts one, and waiting for the flush was about half the upsert's time
    (docs/speed.md); a crash of PostgreSQL itself may lose the last fraction of a second of
    counts, never a memory, and never leaves a torn row. Inside a caller's transaction the
    setting would reach the caller's own writes, so there it is left alone.
    """
    day = day or timezone.now().astimezone(UTC).date()
    metrics = sorted(counts)
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(metrics))
    params = []
    for metric in metrics:
        params += [str(workspace_id), str(agent_id) if agent_id else None, day, metric[:64], counts[metric]]
    table = DailyCounter._meta.db_table
    connection = connections["default"]
    # set_config(..., true) lasts until the end of this statement's own transaction.
    asynchronous = (
        "" if connection.in_atomic_block else " RETURNING set_config('synchronous_commit', 'off', true)"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (workspace_id, agent_id, day, metric, value) VALUES {values} "
            "ON CONFLICT (workspace_id, day, metric, agent_id) "
            f"DO UPDATE SET value = {table}.value + EXCLUDED.value{asynchronous}",
            params,
        )


def _day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.combine(day, dt.time.min, tzinfo=UTC)
    return start, start + dt.timedelta(days=1)


def _tier_rows(tier: Tier, *, first: dt.date, workspace_ids) -> tuple[dict, dict]:
    """(totals now by (workspace, agent), created by (workspace, agent, day) from `first`),
    from one scan of the tier's table."""
    start, _ = _day_bounds(first)
    rows = tier.queryset()
    if workspace_ids is not None:
        rows = rows.filter(workspace_id__in=workspace_ids)
    day = Case(
        When(created_at__gte=start, then=TruncDate("created_at", tzinfo=UTC)),
        default=None,
        output_field=DateField(),
    )
    fields = ["workspace_id", "owner", "day"] if tier.agent else ["workspace_id", "day"]
    annotations = {"day": day}
    if tier.agent:
        annotations["owner"] = F(tier.agent)
    grouped = rows.annotate(**annotations).values(*fields).annotate(n=Count("pk")).order_by()
    totals: dict = defaultdict(int)
    created: dict = defaultdict(int)
    for row in grouped:
        key = (row["workspace_id"], row.get("owner"))
        totals[key] += row["n"]
        if row["day"] is not None:
            created[(*key, row["day"])] += row["n"]
    return totals, created


def _entries_extracted(*, first: dt.date, last: dt.date, workspace_ids) -> dict:
    from episodic.models import EpisodicEntry

    start, _ = _day_bounds(first)
    _, end = _day_bounds(last)
    rows = EpisodicEntry.objects.filter(created_at__gte=start, created_at__lt=end).exclude(
        source=EpisodicEntry.Source.AGENT_DIRECT
    )
    if workspace_ids is not None:
        rows = rows.filter(workspace_id__in=workspace_ids)
    grouped = (
        rows.annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("workspace_id", "agent_id", "day")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {(r["workspace_id"], r["agent_id"], r["day"]): r["n"] for r in grouped}


# Confirmations and contradictions of facts, as the facts tier audits them: a direct
# remember reports its outcome, a cross-key consolidation its decision, and a held value
# approved in review over another current one names that one (`previous_id`, on the approved
# fact's event only: the replaced version gets no event of its own, so nothing counts twice).
FACT_CONFIRMED = Q(changes__outcome="confirmed") | Q(action="update", changes__decision="noop")
FACT_CONTRADICTED = (
    Q(changes__outcome="superseded")
    | Q(action="update", changes__decision="supersede")
    | Q(action="update", changes__review="approved", changes__previous_id__isnull=False)
)


def _facts_audited(*, first: dt.date, last: dt.date, workspace_ids) -> dict:
    """{(workspace, None, day): (confirmed, contradicted)}: one query per workspace, so each
    reads the audit trail's (workspace, -at) index instead of scanning the whole trail."""
    start, _ = _day_bounds(first)
    _, end = _day_bounds(last)
    ids = workspace_ids if workspace_ids is not None else Workspace.objects.values_list("pk", flat=True)
    found = {}
    for workspace_id in ids:
        grouped = (
            AuditEvent.objects.filter(workspace_id=workspace_id, at__gte=start, at__lt=end)
            .filter(entity_type="fact")
            .annotate(day=TruncDate("at", tzinfo=UTC))
            .values("day")
            .annotate(
                confirmed=Count("pk", filter=FACT_CONFIRMED),
                contradicted=Count("pk", filter=FACT_CONTRADICTED),
            )
            .order_by()
        )
        for row in grouped:
            found[(workspace_id, None, row["day"])] = (row["confirmed"], row["contradicted"])
    return found


def _embedding_backlog(workspace_ids) -> dict:
    """{(workspace, tier): rows without a vector}, with the filters of the tiers' sweeps."""
    from episodes.models import Episode, EpisodeEmbedding
    from episodic.models import EntryEmbedding, EpisodicEntry
    from facts.models import Fact, FactEmbedding
    from procedures.models import Procedure, ProcedureEmbedding
    from store.models import StoreItem, StoreItemEmbedding
    from threads.models import Message, MessageEmbedding
    from threads.services.embeddings import EMBEDDABLE_ROLES

    agents = Agent.objects.only("pk", "memory_settings")
    semantic = [agent.pk for agent in agents if memory_settings_for(agent).semantic_recall]
    missing = {
        "facts": Fact.objects.filter(valid_to__isnull=True).filter(
            ~Exists(FactEmbedding.objects.filter(fact=OuterRef("pk")))
        ),
        "entries": EpisodicEntry.objects.filter(status=EpisodicEntry.Status.ACTIVE).filter(
            ~Exists(EntryEmbedding.objects.filter(entry=OuterRef("pk")))
        ),
        "messages": Message.objects.filter(
            role__in=EMBEDDABLE_ROLES, thread__agent__in=semantic, thread__memory_user__isnull=False
        )
        .exclude(content="")
        .filter(~Exists(MessageEmbedding.objects.filter(message=OuterRef("pk")))),
        "episodes": Episode.objects.filter(~Exists(EpisodeEmbedding.objects.filter(episode=OuterRef("pk")))),
        "procedures": Procedure.objects.filter(is_active=True).filter(
            ~Exists(ProcedureEmbedding.objects.filter(procedure=OuterRef("pk")))
        ),
        "store": StoreItem.objects.exclude(search_text="").filter(
            ~Exists(StoreItemEmbedding.objects.filter(item=OuterRef("pk")))
        ),
    }
    if not semantic:
        missing.pop("messages")
    found = {}
    for tier, rows in missing.items():
        if workspace_ids is not None:
            rows = rows.filter(workspace_id__in=workspace_ids)
        for row in rows.values("workspace_id").annotate(n=Count("pk")).order_by():
            found[(row["workspace_id"], tier)] = row["n"]
    return found


def _llm_jobs_waiting(workspace_ids) -> dict:
    """{workspace: LLM jobs not done} (core.lib.fair_queue), read through its queue index."""
    rows = LLMJob.objects.exclude(state=LLMJob.State.DONE)
    if workspace_ids is not None:
        rows = rows.filter(workspace_id__in=workspace_ids)
    return dict(
        rows.values("workspace_id").annotate(n=Count("pk")).order_by().values_list("workspace_id", "n")
    )


def activity_aggregate(
    *, first: dt.date | None = None, last: dt.date | None = None, workspace_ids=None
) -> dict:
    """Recompute the daily metrics of the days `first`..`last` (default: yesterday and
    today, UTC) of every workspace (or of `workspace_ids`). Idempotent: the days' rows are
    replaced in one transaction. Totals of a day count the rows that exist now and were
    created by that day's end; the embedding backlog is written on today's row only.
    Returns {"days": n, "rows": rows written}.
    """
    today = timezone.now().astimezone(UTC).date()
    last = min(last or today, today)
    first = first or (last - dt.timedelta(days=1))
    if first > last:
        return {"days": 0, "rows": 0}
    ids = list(workspace_ids) if workspace_ids is not None else None
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    values: dict = defaultdict(int)  # (workspace, agent, day, metric) -> value

    wanted = set(days)
    walk = [today - dt.timedelta(days=i) for i in range((today - first).days + 1)]
    for tier in _tiers():
        totals, created = _tier_rows(tier, first=first, workspace_ids=ids)
        for (workspace_id, agent_id, day), n in created.items():
            if day in wanted:
                values[(workspace_id, agent_id, day, CREATED + tier.name)] = n
        # Walking back from today: the total at a day's end is today's minus what came after.
        after: dict = defaultdict(int)
        for day in walk:
            for key, total in totals.items():
                if day in wanted:
                    values[(*key, day, TOTAL + tier.name)] = total - after[key]
                after[key] += created.get((*key, day), 0)

    extracted = _entries_extracted(first=first, last=last, workspace_ids=ids)
    for (workspace_id, agent_id, day), n in extracted.items():
        values[(workspace_id, agent_id, day, ENTRIES_EXTRACTED)] = n
    for (workspace_id, agent_id, day), (confirmed, contradicted) in _facts_audited(
        first=first, last=last, workspace_ids=ids
    ).items():
        if confirmed:
            values[(workspace_id, agent_id, day, FACTS_CONFIRMED)] = confirmed
        if contradicted:
            values[(workspace_id, agent_id, day, FACTS_CONTRADICTED)] = contradicted
    if last == today:
        for (workspace_id, tier), n in _embedding_backlog(ids).items():
            values[(workspace_id, None, today, EMBEDDING_BACKLOG + tier)] = n
        for workspace_id, n in _llm_jobs_waiting(ids).items():
            values[(workspace_id, None, today, LLM_JOBS_WAITING)] = n

    now = timezone.now()
    rows = [
        DailyMetric(workspace_id=w, agent_id=a, day=day, metric=metric, value=value, computed_at=now)
        for (w, a, day, metric), value in values.items()
        if value
    ]
    with transaction.atomic():
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [AGGREGATE_LOCK])
        stale = DailyMetric.objects.filter(day__gte=first, day__lte=last)
        if ids is not None:
            stale = stale.filter(workspace_id__in=ids)
        stale.delete()
        # 2,000 rows per INSERT: ~25 metrics x 10 agents x 8 days of one workspace.
        DailyMetric.objects.bulk_create(rows, batch_size=2000)
    return {"days": len(days), "rows": len(rows)}
