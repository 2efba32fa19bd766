"""Reads of the one search across tiers: each tier's own list selector with its FilterSet's `q`
(facts, episodic entries, procedures, people), so "more in <tier>" opens the tab showing the
same matches.

Episodes and messages are matched on their stored tsvectors (`search_tsv`, episodes migration
0004 and threads migration 0003), as the tiers' own searches match them; messages have no
tab and the episodes tab's `q` is a substring filter, so their "more" is this page's list of
the tier.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import BooleanField, F, FloatField, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Extract

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError
from core.filters import filterset_apply
from episodes.selectors import episode_list
from episodic.selectors import entry_list, entry_search_by_meaning
from facts.selectors import fact_list
from identities.filters import MemoryUserFilter
from identities.models import ChannelIdentity, MemoryUser
from identities.selectors import memory_user_scope
from procedures.selectors import procedure_list
from threads.models import Message
from threads.selectors import message_search_by_meaning

# Nobody searches with more words than this; a longer query is cut, never refused.
SEARCH_QUERY_CHARS = 200
# Rows per group on the results page and under the header box. Each tier's query reads one
# more row than it shows, to know whether "more in <tier>" has anything behind it.
PAGE_PER_TIER = 5
LIVE_PER_TIER = 3
# A hit's text is cut to this many characters (a fact's JSON value, a message).
SNIPPET_CHARS = 160
# What a group by meaning says when nothing of its tier has a stored vector yet. Messages are
# embedded only for agents with semantic recall on (threads.services.messages).
ENTRIES_NOT_EMBEDDED = "No entry has a vector to compare with yet."
MESSAGES_NOT_EMBEDDED = (
    "No message has a vector to compare with: messages are embedded for agents with semantic recall on."
)


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
    # (principal, query) -> QuerySet annotated with `rank`, best first; raises
    # ApplicationError for a query it refuses.
    search: Callable
    hit: Callable  # row -> SearchHit
    # False: the tab's own `q` matches differently, so "more" opens this page's list of the tier.
    has_tab_search: bool = True
    # False: left out of the live results under the header box (one search per keystroke).
    live: bool = True
    # What an empty group says instead of "No <label> match.".
    empty: str = ""


# Every tier's matches come with a `rank` and are ordered by it: the best matches first, and,
# as important, a plan that reads the matches through the tier's full-text index and sorts
# them. Ordered by date instead, PostgreSQL walks the date index and tests every row until it
# has found a page, which for a rare word reads the whole table (100,000 entries: ~600 ms,
# procedures, whose tsvector is an expression index: seconds).
def _ts_rank(column: str, query: str):
    return RawSQL(
        f"ts_rank({column}, websearch_to_tsquery('english'::regconfig, %s))",
        [query],
        output_field=FloatField(),
    )


def _ranked(queryset, rank):
    return queryset.annotate(rank=rank).order_by("-rank", "-pk")


def _facts(principal, query):
    # Current versions only, as the tab shows by default.
    facts = fact_list(principal=principal, filters={"q": query})
    return _ranked(facts, SearchRank(F("search_vector"), _websearch(query)))


def _entries(principal, query):
    entries = entry_list(principal=principal, filters={"q": query})
    return _ranked(entries, SearchRank(F("search_vector"), _websearch(query)))


def _by_similarity(queryset, nearest: list, id_column: str):
    """`queryset`'s rows among `nearest` ((id, similarity), closest first), ranked by their
    similarity, looked up by each row's place among the nearest: one parameter pair, where a
    CASE of a hundred WHENs cost Django ~10 ms to compile for each of a group's two queries."""
    ids = [pk for pk, _ in nearest]
    similarity = RawSQL(
        f"(%s::float8[])[array_position(%s::uuid[], {id_column})]",
        [[value for _, value in nearest], ids],
        output_field=FloatField(),
    )
    return _ranked(queryset.filter(pk__in=ids), similarity)


def _entries_by_meaning(principal, query):
    """The workspace's entries nearest in meaning to `query` (WORKSPACE_NEAREST_LIMIT at most),
    ranked by their cosine similarity: what the words of the query do not say ("refund" for
    "wants her money back"). Embedded for the page, not the live results (every keystroke)."""
    nearest = entry_search_by_meaning(principal=principal, query=query)
    return _by_similarity(entry_list(principal=principal), nearest, '"episodes_episodicentry"."id"')


def _messages_by_meaning(principal, query):
    """The workspace's user and assistant messages nearest in meaning to `query`, as above."""
    nearest = message_search_by_meaning(principal=principal, query=query)
    messages = (
        scope_to_principal(Message.objects.all(), principal, agent_field="thread__agent")
        .select_related("thread")
        .defer("tool_calls", "files", "metadata")
    )
    return _by_similarity(messages, nearest, '"threads_message"."id"')


def _episodes(principal, query):
    """Episodes matched on their stored, GIN-indexed tsvector (trigger, input, output, error,
    feedback; episodes migration 0004), as episodes.selectors.episode_search matches them.
    The tab's `q` is a substring filter of three columns that reads every episode (~400 ms at
    100,000 under load), so "more" opens this page's episodes list instead."""
    episodes = episode_list(principal=principal).filter(_matches('"episodes_episode"."search_tsv"', query))
    return _ranked(episodes, _ts_rank('"episodes_episode"."search_tsv"', query))


def _procedures(principal, query):
    """Best match first, ranked on their stored tsvector (procedures migration 0011) as facts
    and entries are."""
    procedures = procedure_list(principal=principal, filters={"q": query})
    return _ranked(procedures, SearchRank(F("search_vector"), _websearch(query)))


def _people(principal, query):
    """The users tab's matches (MemoryUserFilter's `q`: a substring of the display name, the
    canonical id or a channel identity's external id; merged users hidden) without the tab's
    per-person counts; most recently seen first.

    The three substrings are read as one UNION of ids, not the FilterSet's OR of two columns and
    an EXISTS per person: an OR with a correlated subquery can only be a scan of every person
    (~100 ms at 100,000), while each arm of the union can use a trigram index of its column
    where the tier has one. The rank is last_seen_at as a number: a sort the planner cannot
    serve from identities_user_recent, so it never walks that index testing every person."""
    people = filterset_apply(MemoryUserFilter, {}, memory_user_scope(principal))
    text = query.strip()
    if text:
        names = Q(display_name__icontains=text) | Q(canonical_id__icontains=text)
        named = MemoryUser.objects.filter(names, workspace=principal.workspace).order_by().values("pk")
        identified = (
            ChannelIdentity.objects.filter(workspace=principal.workspace, external_id__icontains=text)
            .order_by()
            .values("memory_user_id")
        )
        people = people.filter(pk__in=named.union(identified))
    return _ranked(people, Extract("last_seen_at", "epoch"))


def _matches(column: str, query: str):
    return RawSQL(
        f"{column} @@ websearch_to_tsquery('english'::regconfig, %s)", [query], output_field=BooleanField()
    )


def _websearch(query: str):
    return SearchQuery(query, search_type="websearch", config="english")


def message_search(*, principal: Principal, query: str):
    """User and assistant messages of the principal's threads whose text matches `query`
    (websearch syntax), best match first.

    Matched through threads_message_search, the GIN index on search_tsv (threads migration
    0006); without it every message of the table was read (bench/browser_search.py)."""
    messages = scope_to_principal(Message.objects.all(), principal, agent_field="thread__agent")
    messages = (
        messages.filter(_matches('"threads_message"."search_tsv"', query))
        .select_related("thread")
        .defer("tool_calls", "files", "metadata")
    )
    return _ranked(messages, _ts_rank('"threads_message"."search_tsv"', query))


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


def _close_hit(hit: Callable) -> Callable:
    """`hit` with the row's cosine similarity to the query after its detail: the nearest rows
    are listed whatever they say, and the figure tells a near one from the least far."""

    def close(row) -> SearchHit:
        found = hit(row)
        return replace(found, detail=f"{found.detail} · similarity {row.rank:.2f}")

    return close


TIERS = [
    SearchTier("facts", "Facts", "facts", _facts, _fact_hit),
    SearchTier("entries", "Episodic entries", "entries", _entries, _entry_hit),
    SearchTier(
        "entries-meaning",
        "Entries close in meaning",
        "entries",
        _entries_by_meaning,
        _close_hit(_entry_hit),
        has_tab_search=False,
        live=False,
        empty=ENTRIES_NOT_EMBEDDED,
    ),
    SearchTier("episodes", "Episodes", "episodes", _episodes, _episode_hit, has_tab_search=False),
    SearchTier("procedures", "Procedures", "procedures", _procedures, _procedure_hit),
    SearchTier("people", "People", "users", _people, _person_hit),
    SearchTier(
        "messages",
        "Messages",
        "threads",
        lambda principal, query: message_search(principal=principal, query=query),
        _message_hit,
        has_tab_search=False,
    ),
    SearchTier(
        "messages-meaning",
        "Messages close in meaning",
        "threads",
        _messages_by_meaning,
        _close_hit(_message_hit),
        has_tab_search=False,
        live=False,
        empty=MESSAGES_NOT_EMBEDDED,
    ),
]
TIERS_BY_SLUG = {tier.slug: tier for tier in TIERS}


@dataclass
class TierHits:
    tier: SearchTier
    hits: list
    more: bool  # rows beyond the ones shown
    error: str = ""


def search_everywhere(
    *, principal: Principal, query: str, per_tier: int = PAGE_PER_TIER, live: bool = False
) -> list[TierHits]:
    """The first `per_tier` matches of every tier (`live`: of those the live results show), in
    the tiers' order; each tier one bounded query (a LIMIT of per_tier + 1). A tier that
    refuses the query reports why instead."""
    groups = []
    for tier in TIERS:
        if live and not tier.live:
            continue
        try:
            matches = tier.search(principal, query)
            # Rank and cut over primary keys, then load the page's rows with their joins and
            # annotations: selected whole, every match was joined and its annotations computed
            # before the sort (procedures' `_search` tsvector: ~300 ms at 20,000 on a quiet
            # machine, against ~10 ms this way), as browser.lib.listing pages tabs.
            ids = list(matches.values_list("pk", flat=True)[: per_tier + 1])
            by_pk = {row.pk: row for row in matches.filter(pk__in=ids).order_by()} if ids else {}
            rows = [by_pk[pk] for pk in ids if pk in by_pk]
        except ApplicationError as exc:
            errors = [str(e) for errors in (exc.fields or {}).values() for e in errors]
            groups.append(TierHits(tier, [], False, " ".join(errors) or exc.message))
            continue
        groups.append(TierHits(tier, [tier.hit(row) for row in rows[:per_tier]], len(rows) > per_tier))
    return groups
