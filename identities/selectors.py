"""Reads of memory users: scoping, statistics and the context `identify_user` returns."""

from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from identities.filters import MemoryUserFilter
from identities.models import MemoryUser

MEMORY_USER_NOT_FOUND = "Memory user not found."
# A merge chain longer than this means corrupted data, not a real history.
MERGE_CHAIN_LIMIT = 20


def memory_user_resolve_merged(*, memory_user: MemoryUser) -> MemoryUser:
    """The user `memory_user` was (transitively) merged into, or itself."""
    seen = 0
    while memory_user.merged_into_id is not None and seen < MERGE_CHAIN_LIMIT:
        memory_user = MemoryUser.objects.get(pk=memory_user.merged_into_id)
        seen += 1
    return memory_user


def with_statistics(queryset, *, principal: Principal | None = None):
    """Annotate thread_count and message_count with correlated subqueries (a join of both
    would multiply rows) for list pages without N+1. With `principal`, only the threads and
    messages it may read count (an agent-bound key: its agent's)."""
    from threads.models import Message, Thread

    threads, messages = Thread.objects.all(), Message.objects.all()
    if principal is not None:
        threads = scope_to_principal(threads, principal)
        messages = scope_to_principal(messages, principal, agent_field="thread__agent")
    threads = (
        threads.filter(memory_user=OuterRef("pk"))
        .order_by()
        .values("memory_user")
        .annotate(n=Count("pk"))
        .values("n")
    )
    messages = (
        messages.filter(thread__memory_user=OuterRef("pk"))
        .order_by()
        .values("thread__memory_user")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return queryset.annotate(
        thread_count=Coalesce(Subquery(threads, output_field=IntegerField()), Value(0)),
        message_count=Coalesce(Subquery(messages, output_field=IntegerField()), Value(0)),
    )


def memory_user_scope(principal: Principal):
    return scope_to_principal(MemoryUser.objects.all(), principal, agent_field=None)


def memory_user_get(*, principal: Principal, memory_user_id) -> MemoryUser:
    memory_user = (
        with_statistics(memory_user_scope(principal), principal=principal)
        .select_related("merged_into")
        .prefetch_related("identities")
        .filter(pk=memory_user_id)
        .first()
    )
    if memory_user is None:
        raise NotFoundError(MEMORY_USER_NOT_FOUND)
    return memory_user


def memory_user_list(*, principal: Principal, filters=None):
    from facts.filters import filterset_apply

    queryset = memory_user_scope(principal).select_related("merged_into").prefetch_related("identities")
    return with_statistics(filterset_apply(MemoryUserFilter, filters, queryset), principal=principal)


def memory_user_context(*, memory_user: MemoryUser, agent=None, episodes_limit: int = 5) -> dict:
    """What an agent needs to know when a person shows up: their user-scope facts, cached
    preferences and most recent episodes (of `agent` when given)."""
    from episodes.models import Episode
    from facts.models import Fact
    from facts.selectors import with_effective_confidence

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
