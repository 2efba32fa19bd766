"""Reads of memory users: scoping, merge resolution and list statistics."""

from django.core.exceptions import ValidationError
from django.db.models import Case, IntegerField, Q, Value, When

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.filters import filterset_apply
from core.holdings import holdings_statistics
from core.lib.rows import ModelRows
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


def memory_user_legal_holds(*, memory_user: MemoryUser) -> list[MemoryUser]:
    """The legal holds that cover the person's data, as the records they were placed on: the
    person's own first, then those of records merged into them (a merge moves the rows, and
    such a hold keeps covering them: retention and erasure read it), oldest first. The
    record's `pk` is the hold's `placed_on`."""
    own_first = Case(When(pk=memory_user.pk, then=Value(0)), default=Value(1), output_field=IntegerField())
    return list(
        MemoryUser.objects.filter(Q(pk=memory_user.pk) | Q(merged_into=memory_user.pk))
        .filter(workspace_id=memory_user.workspace_id, legal_hold_at__isnull=False)
        .only("pk", "merged_into_id", "legal_hold_at", "legal_hold_reason", "legal_hold_by")
        .order_by(own_first, "legal_hold_at", "pk")
    )


def with_statistics(queryset, *, principal: Principal | None = None):
    """Annotate the per-user counts the tiers declare to core.holdings (thread_count,
    message_count). With `principal`, only the rows it may read count (an agent-bound key:
    its agent's)."""
    return holdings_statistics(queryset, principal=principal)


def memory_user_scope(principal: Principal):
    return scope_to_principal(MemoryUser.objects.all(), principal, agent_field=None)


_BY_ID = ModelRows(MemoryUser)


def memory_user_in_scope(*, principal: Principal, memory_user_id) -> MemoryUser:
    """The memory user `memory_user_id` names in the principal's workspace (memory users are
    the workspace's, whatever the key's agent: `memory_user_scope`), else NotFoundError, the
    same for an id of another workspace as for one that never existed.

    Nearly every tool call names its person, so the statement is built once: compiling it
    through the ORM took about twice as long as running it (docs/speed.md)."""
    try:
        pk = MemoryUser._meta.pk.to_python(memory_user_id)
    except ValidationError:
        pk = None
    rows = _BY_ID.fetch("WHERE workspace_id = %s AND id = %s", [principal.workspace.pk, pk]) if pk else []
    if not rows:
        raise NotFoundError(MEMORY_USER_NOT_FOUND, fields={"memory_user": [MEMORY_USER_NOT_FOUND]})
    return rows[0]


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
    queryset = memory_user_scope(principal).select_related("merged_into").prefetch_related("identities")
    return with_statistics(filterset_apply(MemoryUserFilter, filters, queryset), principal=principal)
