"""Reads of facts: scoped lookups, visible facts, fuzzy and semantic search, the facts half of
recall (runtime.selectors.recall), and the memory-user context identify_user returns."""

import logging

from django.conf import settings
from django.db.models import F, FloatField, UUIDField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.filters import any_word_tsquery_sql, filterset_apply
from core.lib.replica import read_connection
from episodes.models import Episode
from facts.filters import FactFilter
from facts.models import Fact, FactEmbedding, FactKey, key_normalize
from threads.selectors import MemoryContext

logger = logging.getLogger(__name__)

FACT_NOT_FOUND = "Fact not found."
# Lower rank wins: the most specific scope answers a lookup.
SCOPE_ORDER = {Fact.Scope.SESSION: 0, Fact.Scope.USER: 1, Fact.Scope.AGENT: 2, Fact.Scope.GLOBAL: 3}
# The scope's reference of a fact (see facts/migrations/0002_owner_indexes.py): must stay
# the exact expression of the facts_owner_* indexes or they are not used.
FACT_OWNER = Coalesce("thread", "memory_user", "agent", "workspace", output_field=UUIDField())


def fact_scope_for_principal(queryset, principal: Principal):
    """Workspace facts; an agent-bound key also sees only its own agent's agent- and
    session-scope facts (user and global facts have no agent and are shared)."""
    return scope_to_principal(queryset, principal, shared=True)


def with_effective_confidence(queryset):
    """Annotate `effective_confidence`: the stored confidence, decayed at read time by
    FACTS_CONFIDENCE_HALF_LIFE_DAYS since the last confirmation when that setting is > 0.

    Decay is computed at read time (no periodic task rewrites rows), so turning the setting
    off restores every confidence exactly.
    """
    half_life_days = settings.FACTS_CONFIDENCE_HALF_LIFE_DAYS
    if not half_life_days or half_life_days <= 0:
        return queryset.annotate(effective_confidence=F("confidence"))
    decayed = RawSQL(
        '"facts_fact"."confidence" * power(0.5, extract(epoch from (now() - '
        '"facts_fact"."last_confirmed_at")) / %s)',
        (float(half_life_days) * 86400.0,),
        output_field=FloatField(),
    )
    return queryset.annotate(effective_confidence=decayed)


# The hot paths below (lookup, visible facts, key dictionary) are constant SQL strings:
# measured at 100k facts on the 2-core dev box, building and compiling the equivalent
# ORM query cost ~4.6 ms per call against ~0.3 ms to execute it. The scope rules stay in
# this module only, and the SQL is written to hit the indexes named in facts.models.
_LOOKUP_SQL = """
SELECT * FROM facts_fact
WHERE workspace_id = %(workspace)s AND key = %(key)s AND valid_to IS NULL AND (
       (scope = 'global' AND memory_user_id IS NULL AND agent_id IS NULL AND thread_id IS NULL)
    OR (scope = 'agent' AND memory_user_id IS NULL AND agent_id = %(agent)s AND thread_id IS NULL)
    OR (scope = 'user' AND memory_user_id = %(memory_user)s AND agent_id IS NULL AND thread_id IS NULL)
    OR (scope = 'session' AND thread_id = %(thread)s)
)
LIMIT 4
"""


def fact_lookup(*, workspace, key: str, agent=None, memory_user=None, thread=None) -> Fact | None:
    """The current value of `key` from the most specific scope: session, user, agent, global.

    One query over at most four rows, each branch an equality prefix of the
    facts_current_key unique index (a NULL reference matches nothing); the most specific
    row is picked here.
    """
    params = {
        "workspace": workspace.pk,
        "key": key,
        "agent": agent.pk if agent else None,
        "memory_user": memory_user.pk if memory_user else None,
        "thread": thread.pk if thread else None,
    }
    rows = list(Fact.objects.raw(_LOOKUP_SQL, params))
    return min(rows, key=lambda fact: SCOPE_ORDER[fact.scope]) if rows else None


def _owner_ids(context: MemoryContext) -> list:
    return [obj.pk for obj in (context.thread, context.memory_user, context.agent, context.workspace) if obj]


def fact_visible(*, context: MemoryContext):
    """Current facts visible in a context (every applicable scope), with effective confidence."""
    queryset = Fact.objects.annotate(owner=FACT_OWNER).filter(
        workspace=context.workspace, valid_to__isnull=True, owner__in=_owner_ids(context)
    )
    return with_effective_confidence(queryset)


_OWNER_SQL = "COALESCE(thread_id, memory_user_id, agent_id, workspace_id)"
_DECAYED_SQL = "confidence * power(0.5, extract(epoch from (now() - last_confirmed_at)) / %(half_life)s)"
# Key filters for fuzzy search. Few keys: an index probe per key on facts_owner_key
# (planning costs ~5 us per constant, estimated against the column statistics). Many keys:
# `key_normalized || ''` has no statistics, so planning stays flat, and each branch walks
# facts_owner_confidence in order probing a hashed constant array; with many keys matches
# are dense and the walk stops early. 64 is where the two plans cost the same at 1M facts.
REFINE_KEYS_FEW = "AND key_normalized = ANY(%(keys)s)"
REFINE_KEYS_MANY = "AND (key_normalized || '') = ANY(%(keys)s)"
FEW_KEYS = 64
REFINE_TEXT = "AND search_vector @@ websearch_to_tsquery('english'::regconfig, %(query)s)"


def _best_visible(
    *, context: MemoryContext, refine: str = "", params=None, limit: int, min_confidence: float, walk=True
):
    """The `limit` most confident (then newest) visible facts matching `refine` (one of the
    REFINE_* conditions, with its `params`), each with `effective_confidence`.

    One statement: a UNION ALL of one branch per owner (at most four), each walking
    facts_owner_confidence in order and stopping after `limit` rows (or, with
    `walk=False`, sorting its bitmap-selected matches), instead of sorting every visible
    fact. With decay the order is computed, so each branch sorts its matching rows.
    """
    decaying = settings.FACTS_CONFIDENCE_HALF_LIFE_DAYS > 0
    effective = _DECAYED_SQL if decaying else "confidence"
    order = "effective_confidence DESC, valid_from DESC" if decaying else "confidence DESC, valid_from DESC"
    if not walk:
        # Rare matches make an in-order walk read most of an owner's rows (~80 ms for a
        # two-word query over 20k global facts); `+ 0` hides the index order so the planner
        # intersects the GIN and owner bitmaps and sorts the few matches instead.
        order = f"({effective}) + 0 DESC, valid_from DESC"
    owners = _owner_ids(context)
    if walk:
        owner_conditions = [f"{_OWNER_SQL} = %(owner{i})s" for i in range(len(owners))]
    else:
        # One branch for every owner: the GIN posting lists are then read once, not per owner.
        owner_conditions = [f"{_OWNER_SQL} IN ({', '.join(f'%(owner{i})s' for i in range(len(owners)))})"]
    branches = [
        f"(SELECT *, {effective} AS effective_confidence FROM facts_fact "
        f"WHERE workspace_id = %(workspace)s AND valid_to IS NULL AND {condition} "
        f"AND {effective} >= %(min_confidence)s {refine} ORDER BY {order} LIMIT %(limit)s)"
        for condition in owner_conditions
    ]
    sql = (
        f"SELECT * FROM ({' UNION ALL '.join(branches)}) visible "
        "ORDER BY effective_confidence DESC, valid_from DESC LIMIT %(limit)s"
    )
    return _visible_facts(
        sql, {**(params or {}), **_visible_params(context, owners, min_confidence, limit)}, context
    )


def _visible_params(context: MemoryContext, owners: list, min_confidence: float, limit: int) -> dict:
    """The parameters every statement over the visible facts names (`_best_visible`'s)."""
    return {
        "workspace": context.workspace.pk,
        "min_confidence": min_confidence,
        "limit": limit,
        "half_life": float(settings.FACTS_CONFIDENCE_HALF_LIFE_DAYS) * 86400.0,
        **{f"owner{i}": owner for i, owner in enumerate(owners)},
    }


def _visible_facts(sql: str, values: dict, context: MemoryContext) -> list:
    """The facts `sql` reads, with their agent set from the context."""
    facts = list(Fact.objects.raw(sql, values))
    for fact in facts:
        # A visible fact's agent is the context's (agent and session scopes) or none.
        if context.agent is not None and fact.agent_id == context.agent.pk:
            fact.agent = context.agent
    return facts


# The visible facts holding any word of the query (core.filters.any_word_tsquery_sql), those
# holding its rarest words among them first: each word weighs ln(1 + matched / holding it),
# as an inverse document frequency does, so that "dog" outranks "called" in "what is my dog
# called" whatever the facts' confidences.
_BY_RARE_WORDS_SQL = """
WITH matched AS MATERIALIZED (
    SELECT id, search_vector, {effective} AS effective_confidence, valid_from FROM facts_fact
    WHERE workspace_id = %(workspace)s AND valid_to IS NULL AND {owner} IN ({owners})
      AND {effective} >= %(min_confidence)s AND search_vector @@ {any_word}
),
words AS (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english'::regconfig, %(query)s))),
rarity AS MATERIALIZED (
    SELECT quote_literal(w.lexeme)::tsquery AS word,
           ln(1 + (SELECT count(*) FROM matched)::float8 / count(*)) AS weight
    FROM words w JOIN matched m ON m.search_vector @@ quote_literal(w.lexeme)::tsquery
    GROUP BY w.lexeme
),
best AS (
    SELECT m.id, sum(r.weight) AS score, m.effective_confidence, m.valid_from
    FROM matched m JOIN rarity r ON m.search_vector @@ r.word
    GROUP BY m.id, m.effective_confidence, m.valid_from
    ORDER BY score DESC, m.effective_confidence DESC, m.valid_from DESC
    LIMIT %(limit)s
)
SELECT f.*, b.effective_confidence FROM best b JOIN facts_fact f ON f.id = b.id
ORDER BY b.score DESC, b.effective_confidence DESC, b.valid_from DESC
"""


def _visible_by_rare_words(*, context: MemoryContext, query: str, limit: int, min_confidence: float):
    """The `limit` visible facts holding the rarest words of `query` (`_BY_RARE_WORDS_SQL`),
    each with `effective_confidence`: what answers a question when no fact holds every one of
    its words."""
    owners = _owner_ids(context)
    sql = _BY_RARE_WORDS_SQL.format(
        effective=_DECAYED_SQL if settings.FACTS_CONFIDENCE_HALF_LIFE_DAYS > 0 else "confidence",
        owner=_OWNER_SQL,
        owners=", ".join(f"%(owner{i})s" for i in range(len(owners))),
        any_word=any_word_tsquery_sql("%(query)s"),
    )
    values = {"query": query, **_visible_params(context, owners, min_confidence, limit)}
    return _visible_facts(sql, values, context)


# Matching keys considered at most; a query this vague ("a") is not a key search anymore.
FUZZY_KEYS_LIMIT = 500
_KEYS_BY_WORDS_SQL = (
    "SELECT key_normalized FROM facts_factkey "
    "WHERE workspace_id = %s AND key_normalized LIKE ALL(%s) LIMIT %s"
)
# Typo tolerance works on words, not keys: each query word missing from the dictionary's
# words is replaced by its most trigram-similar word (similarity >= 0.3). Comparing a short
# word with a few thousand distinct words is far cheaper than word_similarity against every
# key (~100 ms at 6,000 keys on the dev box under load). Words are de-duplicated first
# (MATERIALIZED, or the planner computes similarity for every word of every key), and
# numbers and words of very different length are skipped before the trigram comparison.
_WORD_FIX_SQL = """
WITH words AS MATERIALIZED (
    SELECT DISTINCT word FROM facts_factkey, unnest(string_to_array(key_normalized, ' ')) AS word
    WHERE workspace_id = %s AND word !~ '^[0-9]+$'
)
SELECT query_word, (
    SELECT word FROM words
    WHERE abs(length(word) - length(query_word)) <= 3 AND similarity(word, query_word) >= 0.3
    ORDER BY similarity(word, query_word) DESC, word LIMIT 1
)
FROM unnest(%s::text[]) AS query_word
"""


def _like_escape(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def fuzzy_keys(*, workspace, key: str) -> list[str]:
    """Normalized keys of the workspace like `key`, from the key dictionary (FactKey).

    Spaces, underscores and hyphens are equivalent. Keys containing every word of `key` in
    any order ("local time" finds lesson_local_time_command and time-local). When none
    does, each word is spell-corrected against the dictionary's words by trigram
    similarity and the search repeats ("favorite colour" finds favourite_colour).
    """
    normalized = key_normalize(key)
    if not normalized:
        return []
    words = normalized.split()
    with read_connection(FactKey).cursor() as cursor:
        cursor.execute(
            _KEYS_BY_WORDS_SQL, [workspace.pk, [f"%{_like_escape(w)}%" for w in words], FUZZY_KEYS_LIMIT]
        )
        keys = [row[0] for row in cursor.fetchall()]
        if keys:
            return keys
        cursor.execute(_WORD_FIX_SQL, [workspace.pk, words])
        fixed = [replacement or word for word, replacement in cursor.fetchall()]
        if fixed == words:
            return []
        cursor.execute(
            _KEYS_BY_WORDS_SQL, [workspace.pk, [f"%{_like_escape(w)}%" for w in fixed], FUZZY_KEYS_LIMIT]
        )
        return [row[0] for row in cursor.fetchall()]


def fact_fuzzy_search(*, context: MemoryContext, key: str, limit: int = 10, min_confidence: float = 0.0):
    """Visible facts whose key is like `key` (see fuzzy_keys), most confident first."""
    keys = fuzzy_keys(workspace=context.workspace, key=key)
    if not keys:
        return []
    return _best_visible(
        context=context,
        refine=REFINE_KEYS_FEW if len(keys) <= FEW_KEYS else REFINE_KEYS_MANY,
        params={"keys": keys},
        limit=limit,
        min_confidence=min_confidence,
    )


def fact_get(*, principal: Principal, fact_id) -> Fact:
    fact = (
        fact_scope_for_principal(Fact.objects.all(), principal)
        .select_related("agent", "memory_user", "thread")
        .filter(pk=fact_id)
        .first()
    )
    if fact is None:
        raise NotFoundError(FACT_NOT_FOUND)
    return fact


def fact_list(*, principal: Principal, filters=None):
    # Held, rejected and merged facts were never versions of their key: they are read in the
    # review queue (review.selectors), not here.
    queryset = (
        fact_scope_for_principal(Fact.objects.all(), principal)
        .filter(review=Fact.Review.APPROVED)
        .select_related("agent", "memory_user", "thread")
    )
    return with_effective_confidence(filterset_apply(FactFilter, filters, queryset))


def fact_history(*, fact: Fact):
    """Every version of the fact's key in the same scope reference, newest first."""
    return (
        Fact.objects.filter(
            workspace_id=fact.workspace_id,
            key=fact.key,
            scope=fact.scope,
            agent_id=fact.agent_id,
            memory_user_id=fact.memory_user_id,
            thread_id=fact.thread_id,
            review=Fact.Review.APPROVED,
        )
        .select_related("agent", "memory_user", "thread")
        .order_by("-valid_from")
    )


def query_embed(*, workspace, query: str):
    """(vector, model) of `query` under the workspace's embedding provider, or (None, "")
    when the provider fails: recall then answers from full-text search alone.

    An endpoint is asked as a search's query is (`embed_query`: the same vector, waited for at
    most EMBEDDING_QUERY_TIMEOUT_SECONDS, not asked during its retry window after a failure).
    The local model embeds the query as a stored text, as before: its query graph would move
    the similarities RECALL_SEMANTIC_MIN_SIMILARITY is set against."""
    from core.embeddings import EmbeddingError, LocalEmbeddingProvider, embedding_provider_for

    provider = embedding_provider_for(workspace)
    try:
        if isinstance(provider, LocalEmbeddingProvider):
            return provider.embed([query])[0], provider.model_name
        return provider.embed_query(query), provider.model_name
    except (EmbeddingError, OSError):
        logger.warning("Query embedding failed; recall falls back to full-text search.", exc_info=True)
        return None, ""


def fact_semantic_search(*, context: MemoryContext, query_vector, model: str, limit: int) -> list[Fact]:
    """Current visible facts whose vector under `model` is at least
    RECALL_SEMANTIC_MIN_SIMILARITY cosine-similar to `query_vector`, closest first, each
    with a `similarity` attribute. An exact scan of the context's vectors, narrowed by
    the facts' owner index."""
    from pgvector.django import CosineDistance

    max_distance = 1 - settings.RECALL_SEMANTIC_MIN_SIMILARITY
    hits = (
        FactEmbedding.objects.annotate(
            owner=Coalesce(
                "fact__thread",
                "fact__memory_user",
                "fact__agent",
                "fact__workspace",
                output_field=UUIDField(),
            )
        )
        .filter(
            model=model,
            dimensions=len(query_vector),
            fact__workspace=context.workspace,
            fact__valid_to__isnull=True,
            owner__in=_owner_ids(context),
        )
        .annotate(distance=CosineDistance("embedding", query_vector))
        .filter(distance__lte=max_distance)
        .order_by("distance")
        .values_list("fact_id", "distance")[:limit]
    )
    distances = dict(hits)
    if not distances:
        return []
    facts = with_effective_confidence(Fact.objects.filter(pk__in=distances)).select_related("agent")
    found = []
    for fact in facts:
        fact.similarity = round(1 - distances[fact.pk], 4)
        found.append(fact)
    return found


def fact_recall(
    *,
    context: MemoryContext,
    key: str | None = None,
    query: str | None = None,
    limit: int = 10,
    min_confidence: float = 0.5,
    query_vector=None,
    model: str = "",
) -> tuple[str, list[Fact]]:
    """The facts half of `recall` (runtime.selectors.recall): (mode, facts).

    - key: the exact lookup (most specific scope first, mode "key"); when there is none,
      fuzzy key matching (mode "fuzzy");
    - no key and no query: the facts visible in the context (mode "list");
    - query: full-text search, plus the facts whose vectors under `model` are close to
      `query_vector` when one is given (mode "query"; such a fact carries `similarity`).

    Facts below `min_confidence` (after decay) are left out; results are ordered by
    confidence, then recency.
    """
    if key:
        fact = fact_lookup(
            workspace=context.workspace,
            key=key,
            agent=context.agent,
            memory_user=context.memory_user,
            thread=context.thread,
        )
        if fact is not None:
            fact = with_effective_confidence(Fact.objects.filter(pk=fact.pk)).select_related("agent")[0]
            if fact.effective_confidence >= min_confidence:
                return "key", [fact]
        return "fuzzy", fact_fuzzy_search(
            context=context, key=key, limit=limit, min_confidence=min_confidence
        )
    if not query:
        return "list", _best_visible(context=context, limit=limit, min_confidence=min_confidence)
    matched = _best_visible(
        context=context,
        refine=REFINE_TEXT,
        params={"query": query},
        walk=False,
        limit=limit,
        min_confidence=min_confidence,
    )
    if not matched:
        # A question seldom holds only words its answer holds ("what is my dog called" for
        # dog_name): with no fact holding them all, those holding its rarest words answer, as
        # they would by meaning once their vectors are stored (or never, without vectors).
        matched = _visible_by_rare_words(
            context=context, query=query, limit=limit, min_confidence=min_confidence
        )
    facts = {fact.pk: fact for fact in matched}
    if query_vector is not None:
        for fact in fact_semantic_search(
            context=context, query_vector=query_vector, model=model, limit=limit
        ):
            if fact.effective_confidence < min_confidence:
                continue
            if fact.pk in facts:
                facts[fact.pk].similarity = fact.similarity
            else:
                facts[fact.pk] = fact
    ranked = sorted(facts.values(), key=lambda f: (f.effective_confidence, f.valid_from), reverse=True)
    return "query", ranked[:limit]


def memory_user_context(*, memory_user, agent=None, episodes_limit: int = 5) -> dict:
    """What an agent needs to know when a person shows up: their user-scope facts, cached
    preferences and most recent episodes (of `agent` when given). Here rather than in
    identities: it reads facts and episodes, tiers above identities."""
    facts = with_effective_confidence(
        Fact.objects.filter(
            workspace_id=memory_user.workspace_id,
            memory_user=memory_user,
            scope=Fact.Scope.USER,
            valid_to__isnull=True,
        )
    ).order_by("-confidence", "-valid_from")
    episodes = Episode.objects.filter(workspace_id=memory_user.workspace_id, memory_user=memory_user)
    if agent is not None:
        episodes = episodes.filter(agent=agent)
    episodes = episodes.select_related("agent").order_by("-started_at")[:episodes_limit]
    return {"facts": list(facts[:200]), "preferences": memory_user.preferences, "episodes": list(episodes)}


def fact_lineage(*, fact: Fact) -> dict:
    """The fact of another key that replaced this one or that this one replaced (cross-key
    consolidation), and the consolidation decisions audited on it; same owner and scope only."""
    from core.models import AuditEvent

    owner = {
        "workspace_id": fact.workspace_id,
        "scope": fact.scope,
        "agent_id": fact.agent_id,
        "memory_user_id": fact.memory_user_id,
        "thread_id": fact.thread_id,
    }
    superseded_by = (
        Fact.objects.filter(pk=fact.superseded_by_id, **owner).first() if fact.superseded_by_id else None
    )
    supersedes = list(Fact.objects.filter(superseded_by=fact, **owner).order_by("-valid_from")[:50])
    events = AuditEvent.objects.filter(
        workspace_id=fact.workspace_id, entity_type="fact", entity_id=str(fact.pk)
    ).order_by("-at")[:100]
    decisions = []
    for event in events:
        nested = event.changes.get("consolidation")
        record = nested if isinstance(nested, dict) else event.changes
        if "decision" in record:
            decisions.append({**record, "at": event.at, "actor": event.actor})
    return {"superseded_by": superseded_by, "supersedes": supersedes, "decisions": decisions}
