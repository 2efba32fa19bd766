"""Reads of facts, and `recall`: the one read an agent's tool call makes across facts,
procedures and episodes."""

from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.postgres.search import TrigramWordSimilarity
from django.db.models import Case, F, FloatField, IntegerField, Q, Value, When
from django.db.models.expressions import RawSQL

from core.access import Principal, agent_resolve
from core.errors import ApplicationError, NotFoundError
from core.models import Agent
from facts.filters import FactFilter, filterset_apply, text_search
from facts.models import Fact, key_normalize

FACT_NOT_FOUND = "Fact not found."
THREAD_NOT_FOUND = "Thread not found."
MEMORY_USER_NOT_FOUND = "Memory user not found."
THREAD_OTHER_AGENT = "This thread belongs to another agent."
RECALL_MEMORY_TYPE_UNKNOWN = "memory_type must be facts, procedures, episodes or all."

MEMORY_TYPES = ("facts", "procedures", "episodes", "all")

# Lower rank wins: the most specific scope answers a lookup.
SCOPE_RANK = Case(
    When(scope=Fact.Scope.SESSION, then=Value(0)),
    When(scope=Fact.Scope.USER, then=Value(1)),
    When(scope=Fact.Scope.AGENT, then=Value(2)),
    default=Value(3),
    output_field=IntegerField(),
)


@dataclass(frozen=True)
class MemoryContext:
    """Who is asking: the agent, the person it talks to, and the conversation."""

    workspace: object
    agent: Agent | None = None
    memory_user: object | None = None
    thread: object | None = None


def fact_scope_for_principal(queryset, principal: Principal):
    """Workspace facts; an agent-bound key also sees only its own agent's agent- and
    session-scope facts (user and global facts have no agent and are shared)."""
    queryset = queryset.filter(workspace=principal.workspace)
    if principal.agent is not None:
        queryset = queryset.filter(Q(agent__isnull=True) | Q(agent=principal.agent))
    return queryset


def memory_context_resolve(
    *, principal: Principal, agent: str | None = None, memory_user=None, thread=None, create_agent=False
) -> MemoryContext:
    """Resolve the ids a tool call names into a context, all within the caller's workspace.

    An agent-bound key always acts for its agent. A thread implies its agent and memory
    user when those are not given; a thread of another agent is a 404. A merged memory
    user resolves to the user it was merged into.
    """
    from identities.models import MemoryUser
    from identities.selectors import memory_user_resolve_merged
    from threads.models import Thread

    workspace = principal.workspace
    thread_obj = None
    if thread:
        thread_obj = Thread.objects.filter(workspace=workspace, pk=thread).select_related("agent").first()
        if thread_obj is None:
            raise NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_NOT_FOUND]})
    agent_obj = None
    if agent or principal.agent is not None:
        agent_obj = agent_resolve(principal, agent, create=create_agent)
    elif thread_obj is not None:
        agent_obj = thread_obj.agent
    if thread_obj is not None and agent_obj is not None and thread_obj.agent_id != agent_obj.pk:
        raise NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_OTHER_AGENT]})
    user_obj = None
    if memory_user:
        user_obj = MemoryUser.objects.filter(workspace=workspace, pk=memory_user).first()
        if user_obj is None:
            raise NotFoundError(MEMORY_USER_NOT_FOUND, fields={"memory_user": [MEMORY_USER_NOT_FOUND]})
        user_obj = memory_user_resolve_merged(memory_user=user_obj)
    elif thread_obj is not None and thread_obj.memory_user_id:
        user_obj = memory_user_resolve_merged(memory_user=thread_obj.memory_user)
    return MemoryContext(workspace=workspace, agent=agent_obj, memory_user=user_obj, thread=thread_obj)


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


def fact_lookup(*, workspace, key: str, agent=None, memory_user=None, thread=None) -> Fact | None:
    """The current value of `key` from the most specific scope: session, user, agent, global.

    One indexed query: each scope branch is an equality prefix of facts_current_key.
    """
    condition = Q(scope=Fact.Scope.GLOBAL, memory_user__isnull=True, agent__isnull=True, thread__isnull=True)
    if agent is not None:
        condition |= Q(scope=Fact.Scope.AGENT, memory_user__isnull=True, agent=agent, thread__isnull=True)
    if memory_user is not None:
        condition |= Q(
            scope=Fact.Scope.USER, memory_user=memory_user, agent__isnull=True, thread__isnull=True
        )
    if thread is not None:
        condition |= Q(scope=Fact.Scope.SESSION, thread=thread)
    return (
        Fact.objects.filter(condition, workspace=workspace, key=key, valid_to__isnull=True)
        .annotate(scope_rank=SCOPE_RANK)
        .order_by("scope_rank")
        .first()
    )


def fact_visible(*, context: MemoryContext):
    """Current facts visible in a context (every applicable scope), with effective confidence."""
    queryset = Fact.objects.filter(workspace=context.workspace, valid_to__isnull=True).visible_in(
        agent=context.agent, memory_user=context.memory_user, thread=context.thread
    )
    return with_effective_confidence(queryset)


def fact_fuzzy_search(*, context: MemoryContext, key: str, limit: int = 10, min_confidence: float = 0.0):
    """Keys like `key`, with spaces, underscores and hyphens equivalent: a substring of the
    normalized key, or a trigram word similarity above pg_trgm's threshold (typos)."""
    normalized = key_normalize(key)
    if not normalized:
        return []
    queryset = (
        fact_visible(context=context)
        .filter(Q(key_normalized__contains=normalized) | Q(key_normalized__trigram_word_similar=normalized))
        .annotate(similarity=TrigramWordSimilarity(Value(normalized), "key_normalized"))
        .filter(effective_confidence__gte=min_confidence)
        .order_by("-effective_confidence", "-valid_from")
    )
    return list(queryset[:limit])


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
    queryset = fact_scope_for_principal(Fact.objects.all(), principal).select_related(
        "agent", "memory_user", "thread"
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
        )
        .select_related("agent", "memory_user", "thread")
        .order_by("-valid_from")
    )


@dataclass
class RecallResult:
    mode: str  # list | key | fuzzy | query
    facts: list = field(default_factory=list)
    procedures: list = field(default_factory=list)
    episodes: list = field(default_factory=list)


def recall(
    *,
    context: MemoryContext,
    key: str | None = None,
    query: str | None = None,
    memory_type: str = "all",
    limit: int = 10,
    min_confidence: float = 0.5,
) -> RecallResult:
    """What an agent remembers in `context`.

    - no key and no query: the facts visible in the context (mode "list");
    - key: the exact lookup (most specific scope first, mode "key"); when there is none,
      fuzzy key matching (mode "fuzzy");
    - query: full-text search over facts, procedures and episodes per `memory_type`, plus
      semantic matching of facts and procedures when an embedding provider is configured
      (mode "query").

    Facts below `min_confidence` (after decay) are left out; results are ordered by
    confidence, then recency.
    """
    if memory_type not in MEMORY_TYPES:
        raise ApplicationError(
            RECALL_MEMORY_TYPE_UNKNOWN, fields={"memory_type": [RECALL_MEMORY_TYPE_UNKNOWN]}
        )
    want = {"facts", "procedures", "episodes"} if memory_type == "all" else {memory_type}
    if key:
        fact = fact_lookup(
            workspace=context.workspace,
            key=key,
            agent=context.agent,
            memory_user=context.memory_user,
            thread=context.thread,
        )
        if fact is not None:
            fact = with_effective_confidence(Fact.objects.filter(pk=fact.pk)).select_related(
                "agent", "memory_user", "thread"
            )[0]
            if fact.effective_confidence >= min_confidence:
                return RecallResult(mode="key", facts=[fact])
        return RecallResult(
            mode="fuzzy",
            facts=fact_fuzzy_search(context=context, key=key, limit=limit, min_confidence=min_confidence),
        )
    if not query:
        facts = (
            fact_visible(context=context)
            .filter(effective_confidence__gte=min_confidence)
            .select_related("agent", "memory_user", "thread")
            .order_by("-effective_confidence", "-valid_from")
        )
        return RecallResult(mode="list", facts=list(facts[:limit]))

    result = RecallResult(mode="query")
    if "facts" in want:
        facts = (
            text_search(fact_visible(context=context), query)
            .filter(effective_confidence__gte=min_confidence)
            .select_related("agent", "memory_user", "thread")
            .order_by("-effective_confidence", "-valid_from")
        )
        result.facts = list(facts[:limit])
    if "procedures" in want:
        from procedures.selectors import procedure_search

        result.procedures = procedure_search(
            workspace=context.workspace, agent=context.agent, query=query, limit=limit
        )
    if "episodes" in want:
        from episodes.selectors import episode_search

        result.episodes = episode_search(
            workspace=context.workspace,
            agent=context.agent,
            memory_user=context.memory_user,
            query=query,
            limit=limit,
        )
    return result
