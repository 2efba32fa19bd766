"""Every read of the review queue: held entries, facts and learned procedures, and their counts.

Each tier keeps its own review state (episodic.models.EpisodicEntry.review,
facts.models.Fact.review); a procedure learned from episodes waits while it is inactive and
no review decision was audited on it (procedures.services.learning proposes it so). Scope
is the principal's: an agent-bound key sees what its own agent proposed.
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import EmptyResultSet
from django.db.models import CharField, OuterRef, Subquery
from django.db.models.functions import Cast

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.lib.replica import read_connection
from core.models import AuditEvent
from episodic.models import EpisodicEntry
from facts.models import Fact
from procedures.models import Procedure

TIER_ENTRY = "entry"
TIER_FACT = "fact"
TIER_PROCEDURE = "procedure"
TIERS = (TIER_ENTRY, TIER_FACT, TIER_PROCEDURE)

STATE_HELD = "held"
STATE_APPROVED = "approved"
STATE_REJECTED = "rejected"
STATE_MERGED = "merged"
STATES = (STATE_HELD, STATE_APPROVED, STATE_REJECTED, STATE_MERGED)
# The review decisions audited on a procedure (review.services); the newest one is its state.
PROCEDURE_DECISIONS = (STATE_APPROVED, STATE_REJECTED)

REVIEW_ITEM_NOT_FOUND = "Review item not found."


@dataclass
class ReviewItem:
    """One item of the queue, whatever its tier; `row` is the tier's own model instance."""

    tier: str
    row: object
    state: str
    text: str
    evidence: str
    source: str
    agent: object | None
    memory_user: object | None
    created_at: datetime
    review_note: str = ""
    reviewed_at: datetime | None = None
    reviewed_by: str = ""
    # The stored item this one may duplicate: {"id", "text"} (the merge the page suggests).
    similar: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def id(self):
        return self.row.pk

    @property
    def key(self) -> str:
        """`<tier>:<id>`, the one string naming an item in forms and keyboard handlers."""
        return f"{self.tier}:{self.row.pk}"


def _value_text(value) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _procedure_decided():
    return Subquery(
        AuditEvent.objects.filter(
            workspace_id=OuterRef("workspace_id"),
            entity_type="procedure",
            entity_id=Cast(OuterRef("pk"), output_field=CharField()),
            changes__review__in=list(PROCEDURE_DECISIONS),
        )
        .order_by("-at")
        .values("changes__review")[:1]
    )


def entry_review_queryset(*, principal: Principal, state: str = STATE_HELD, agent=None, memory_user=None):
    queryset = scope_to_principal(EpisodicEntry.objects.filter(review=state), principal)
    if agent is not None:
        queryset = queryset.filter(agent=agent)
    if memory_user is not None:
        queryset = queryset.filter(memory_user=memory_user)
    return queryset.select_related("agent", "memory_user").defer("search_vector")


def fact_review_queryset(*, principal: Principal, state: str = STATE_HELD, agent=None, memory_user=None):
    # A held fact of a user or the workspace has no agent of its own: the agent whose setting
    # held it is its reviewer's scope.
    queryset = scope_to_principal(Fact.objects.filter(review=state), principal, agent_field="review_agent")
    if agent is not None:
        queryset = queryset.filter(review_agent=agent)
    if memory_user is not None:
        queryset = queryset.filter(memory_user=memory_user)
    return queryset.select_related("review_agent", "memory_user").defer("search_vector")


def procedure_review_queryset(*, principal: Principal, state: str = STATE_HELD, agent=None, memory_user=None):
    if memory_user is not None or state == STATE_MERGED:
        return Procedure.objects.none()
    queryset = scope_to_principal(
        Procedure.objects.filter(origin=Procedure.Origin.SELF_LEARNED), principal
    ).annotate(review_decided=_procedure_decided())
    if state == STATE_HELD:
        queryset = queryset.filter(is_active=False, review_decided__isnull=True)
    else:
        queryset = queryset.filter(review_decided=state)
    if agent is not None:
        queryset = queryset.filter(agent=agent)
    return queryset.select_related("agent")


QUERYSETS = {
    TIER_ENTRY: entry_review_queryset,
    TIER_FACT: fact_review_queryset,
    TIER_PROCEDURE: procedure_review_queryset,
}


def _entry_item(entry: EpisodicEntry, state: str) -> ReviewItem:
    return ReviewItem(
        tier=TIER_ENTRY,
        row=entry,
        state=state,
        text=entry.content,
        evidence=entry.evidence,
        source=entry.source,
        agent=entry.agent,
        memory_user=entry.memory_user,
        created_at=entry.created_at,
        review_note=entry.review_note,
        reviewed_at=entry.reviewed_at,
        reviewed_by=entry.reviewed_by,
    )


def _fact_item(fact: Fact, state: str) -> ReviewItem:
    return ReviewItem(
        tier=TIER_FACT,
        row=fact,
        state=state,
        text=f"{fact.key}: {_value_text(fact.value)}",
        evidence=fact.evidence,
        source=fact.source,
        agent=fact.review_agent,
        memory_user=fact.memory_user,
        created_at=fact.created_at,
        review_note=fact.review_note,
        reviewed_at=fact.reviewed_at,
        reviewed_by=fact.reviewed_by,
        extra={"key": fact.key, "value": fact.value, "scope": fact.scope, "fact_type": fact.fact_type},
    )


def _procedure_item(procedure: Procedure, state: str) -> ReviewItem:
    return ReviewItem(
        tier=TIER_PROCEDURE,
        row=procedure,
        state=state,
        text=procedure.name,
        evidence=procedure.description,
        source=procedure.origin,
        agent=procedure.agent,
        memory_user=None,
        created_at=procedure.created_at,
        extra={"name": procedure.name, "description": procedure.description},
    )


BUILDERS = {TIER_ENTRY: _entry_item, TIER_FACT: _fact_item, TIER_PROCEDURE: _procedure_item}


def review_list(
    *,
    principal: Principal,
    tier: str | None = None,
    state: str = STATE_HELD,
    agent=None,
    memory_user=None,
    limit: int = 50,
    offset: int = 0,
) -> list[ReviewItem]:
    """One page of the queue, newest first across tiers, with a merge suggestion on each held
    entry and fact. Reads `offset + limit` rows of each tier at most: the queue is short by
    nature (an operator empties it), so deep pages are not worth a keyset."""
    items: list[ReviewItem] = []
    for name in (tier,) if tier else TIERS:
        queryset = QUERYSETS[name](principal=principal, state=state, agent=agent, memory_user=memory_user)
        rows = queryset.order_by("-created_at", "-pk")[: offset + limit]
        items.extend(BUILDERS[name](row, state) for row in rows)
    items.sort(key=lambda item: (item.created_at, str(item.id)), reverse=True)
    page = items[offset : offset + limit]
    if state == STATE_HELD:
        review_similar_attach(page)
    return page


def review_similar_attach(items: list[ReviewItem]) -> None:
    """Point each held entry at the stored entry consolidation compared it with, and each held
    fact at its key's current version: the merge a reviewer most likely wants. Two queries."""
    entry_old = {
        item.row.consolidation.get("old"): item
        for item in items
        if item.tier == TIER_ENTRY and (item.row.consolidation or {}).get("old")
    }
    if entry_old:
        stored = EpisodicEntry.objects.filter(
            pk__in=list(entry_old), status=EpisodicEntry.Status.ACTIVE, review=EpisodicEntry.Review.APPROVED
        ).only("pk", "content", "agent_id", "memory_user_id")
        for entry in stored:
            item = entry_old[str(entry.pk)]
            # The id is data kept in JSON: only an entry of the held one's agent and person,
            # the one its approval may close, is suggested (never another person's text).
            if (entry.agent_id, entry.memory_user_id) == (item.row.agent_id, item.row.memory_user_id):
                item.similar = {"id": str(entry.pk), "text": entry.content}
    facts = [item for item in items if item.tier == TIER_FACT]
    if facts:
        from django.db.models import Q

        condition = Q()
        for item in facts:
            row = item.row
            condition |= Q(
                key=row.key,
                scope=row.scope,
                agent_id=row.agent_id,
                memory_user_id=row.memory_user_id,
                thread_id=row.thread_id,
            )
        workspace_id = facts[0].row.workspace_id
        current = Fact.objects.filter(condition, workspace_id=workspace_id, valid_to__isnull=True).only(
            "pk", "key", "value", "scope", "agent_id", "memory_user_id", "thread_id"
        )
        by_ref = {(f.key, f.scope, f.agent_id, f.memory_user_id, f.thread_id): f for f in current}
        for item in facts:
            row = item.row
            found = by_ref.get((row.key, row.scope, row.agent_id, row.memory_user_id, row.thread_id))
            if found is not None:
                item.similar = {"id": str(found.pk), "text": f"{found.key}: {_value_text(found.value)}"}


def review_count(
    *, principal: Principal, tier: str | None = None, state: str = STATE_HELD, agent=None, memory_user=None
) -> int:
    """How many items of `state` (one tier or all) the list pages through."""
    return sum(
        QUERYSETS[name](principal=principal, state=state, agent=agent, memory_user=memory_user).count()
        for name in ((tier,) if tier else TIERS)
    )


def review_counts(*, principal: Principal, agent=None, memory_user=None) -> dict:
    """{entry, fact, procedure, total}: the held items of each tier, in one query."""
    parts, params = [], []
    for name in TIERS:
        queryset = QUERYSETS[name](principal=principal, agent=agent, memory_user=memory_user)
        try:
            sql, sql_params = queryset.order_by().values("pk").query.sql_with_params()
        except EmptyResultSet:  # A tier the filters rule out (`none()`): nothing to count.
            parts.append("0")
            continue
        parts.append(f"(SELECT count(*) FROM ({sql}) q_{name})")
        params.extend(sql_params)
    with read_connection(EpisodicEntry).cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    counts = dict(zip(TIERS, (int(n) for n in row), strict=True))
    counts["total"] = sum(counts.values())
    return counts


def review_item_get(*, principal: Principal, tier: str, item_id, state: str | None = None) -> ReviewItem:
    """One item of any review state, scoped like the queue; out of scope answers as missing."""
    if tier not in TIERS:
        raise NotFoundError(REVIEW_ITEM_NOT_FOUND)
    for candidate in (state,) if state else STATES:
        row = QUERYSETS[tier](principal=principal, state=candidate).filter(pk=item_id).first()
        if row is not None:
            return BUILDERS[tier](row, candidate)
    raise NotFoundError(REVIEW_ITEM_NOT_FOUND)
