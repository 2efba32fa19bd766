"""Reads of the one search across tiers: each tier's own list selector with its FilterSet's `q`,
so a group shows exactly the first rows its tab shows for the same words.

Messages have no tab; they are matched on `threads_message.search_tsv` (the stored tsvector of
user and assistant messages, threads migration 0003), as semantic recall matches them.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError
from core.filters import filterset_apply
from episodes.selectors import episode_list
from episodic.selectors import entry_list
from facts.selectors import fact_list
from identities.filters import MemoryUserFilter
from identities.selectors import memory_user_scope
from procedures.selectors import procedure_list
from threads.models import Message

# Nobody searches with more words than this; a longer query is cut, never refused.
SEARCH_QUERY_CHARS = 200
# Rows per group on the results page and under the header box. Each tier's query reads one
# more row than it shows, to know whether "more in <tier>" has anything behind it.
PAGE_PER_TIER = 5
LIVE_PER_TIER = 3
# A hit's text is cut to this many characters (a fact's JSON value, a message).
SNIPPET_CHARS = 160


def search_query_clean(text) -> str:
    """`text` as a search: trimmed, cut, without NUL (which PostgreSQL refuses in text)."""
    return " ".join(str(text or "").replace("\x00", " ").split())[:SEARCH_QUERY_CHARS]


def _snippet(value) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


@dataclass(frozen=True)
class SearchHit:
    pk: object
    title: str
    detail: str
    at: object  # a datetime, or None
    link_pk: object  # the row whose page the hit opens (a message opens its thread)


@dataclass(frozen=True)
class SearchTier:
    slug: str  # the group's id and the `tier` query value
    label: str
    tab: str  # the tab slug its "more" link and its rows open (browser.tabs), e.g. "facts"
    # (principal, query) -> ordered QuerySet; raises ApplicationError for a query it refuses.
    search: Callable
    hit: Callable  # row -> SearchHit
    order: str  # the column the listing sorts on, newest first
    has_tab_search: bool = True  # False: "more" opens this page filtered to the tier


def _facts(principal, query):
    # Current versions only, as the tab shows by default.
    return fact_list(principal=principal, filters={"q": query}).order_by("-valid_from", "-pk")


def _entries(principal, query):
    return entry_list(principal=principal, filters={"q": query})


def _episodes(principal, query):
    return episode_list(principal=principal, filters={"q": query}).order_by("-started_at", "-pk")


def _procedures(principal, query):
    return procedure_list(principal=principal, filters={"q": query}).order_by("-created_at", "-pk")


def _people(principal, query):
    # The users tab's FilterSet without the tab's per-person counts: a group shows names only.
    people = filterset_apply(MemoryUserFilter, {"q": query}, memory_user_scope(principal))
    return people.order_by("-last_seen_at", "-pk")


def message_search(*, principal: Principal, query: str):
    """User and assistant messages of the principal's threads whose text matches `query`
    (websearch syntax), newest first."""
    messages = scope_to_principal(Message.objects.all(), principal, agent_field="thread__agent")
    matches = RawSQL(
        '"threads_message"."search_tsv" @@ websearch_to_tsquery(\'english\'::regconfig, %s)',
        [query],
        output_field=BooleanField(),
    )
    return (
        messages.filter(matches)
        .select_related("thread")
        .defer("tool_calls", "files", "metadata")
        .order_by("-created_at", "-pk")
    )


def _fact_hit(fact) -> SearchHit:
    owner = fact.memory_user or (fact.agent.slug if fact.agent_id else "")
    detail = " · ".join(part for part in (fact.get_scope_display(), str(owner) if owner else "") if part)
    return SearchHit(fact.pk, fact.key, f"{_snippet(fact.value)} — {detail}", fact.valid_from, fact.pk)


def _entry_hit(entry) -> SearchHit:
    return SearchHit(
        entry.pk,
        _snippet(entry.content),
        f"{entry.memory_user} · {entry.agent.slug}",
        entry.created_at,
        entry.pk,
    )


def _episode_hit(episode) -> SearchHit:
    text = episode.error or episode.feedback_comment or ""
    outcome = episode.get_outcome_display() if episode.outcome else "open"
    detail = " · ".join(part for part in (outcome, episode.agent.slug, _snippet(text)) if part)
    return SearchHit(episode.pk, episode.trigger_type or "episode", detail, episode.started_at, episode.pk)


def _procedure_hit(procedure) -> SearchHit:
    detail = " · ".join(
        part
        for part in (
            f"v{procedure.version}",
            procedure.agent.slug if procedure.agent_id else "workspace",
            _snippet(procedure.description),
        )
        if part
    )
    return SearchHit(procedure.pk, procedure.name, detail, procedure.created_at, procedure.pk)


def _person_hit(person) -> SearchHit:
    return SearchHit(
        person.pk,
        person.display_name or person.canonical_id,
        person.canonical_id,
        person.last_seen_at,
        person.pk,
    )


def _message_hit(message) -> SearchHit:
    thread = message.thread.title or "Untitled thread"
    return SearchHit(
        message.pk,
        _snippet(message.content),
        f"{message.name or message.role} in {thread}",
        message.created_at,
        message.thread_id,
    )


TIERS = [
    SearchTier("facts", "Facts", "facts", _facts, _fact_hit, "valid_from"),
    SearchTier("entries", "Episodic entries", "entries", _entries, _entry_hit, "created_at"),
    SearchTier("episodes", "Episodes", "episodes", _episodes, _episode_hit, "started_at"),
    SearchTier("procedures", "Procedures", "procedures", _procedures, _procedure_hit, "created_at"),
    SearchTier("people", "People", "users", _people, _person_hit, "last_seen_at"),
    SearchTier(
        "messages",
        "Messages",
        "threads",
        lambda principal, query: message_search(principal=principal, query=query),
        _message_hit,
        "created_at",
        has_tab_search=False,
    ),
]
TIERS_BY_SLUG = {tier.slug: tier for tier in TIERS}


@dataclass
class TierHits:
    tier: SearchTier
    hits: list
    more: bool  # rows beyond the ones shown
    error: str = ""


def search_everywhere(*, principal: Principal, query: str, per_tier: int = PAGE_PER_TIER) -> list[TierHits]:
    """The first `per_tier` matches of every tier, in the tiers' order; each tier one bounded
    query (a LIMIT of per_tier + 1). A tier that refuses the query reports why instead."""
    groups = []
    for tier in TIERS:
        try:
            rows = list(tier.search(principal, query)[: per_tier + 1])
        except ApplicationError as exc:
            errors = [str(e) for errors in (exc.fields or {}).values() for e in errors]
            groups.append(TierHits(tier, [], False, " ".join(errors) or exc.message))
            continue
        groups.append(TierHits(tier, [tier.hit(row) for row in rows[:per_tier]], len(rows) > per_tier))
    return groups
