"""Reads of memory users: scoping, merge resolution and list statistics."""

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Case, IntegerField, Value, When
from django.db.models.expressions import RawSQL

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


# The chain from each record to the person it was (transitively) merged into: one row per hop,
# at most MERGE_CHAIN_LIMIT hops, and never a row twice (a cycle is corrupted data; following
# it would loop until the limit and name an arbitrary member).
_CHAIN_UP = """
    WITH RECURSIVE chain (start_id, id, merged_into_id, depth, path) AS (
        SELECT id, id, merged_into_id, 0, ARRAY[id] FROM {table} WHERE id = ANY(%s)
        UNION ALL
        SELECT chain.start_id, up.id, up.merged_into_id, chain.depth + 1, chain.path || up.id
        FROM chain JOIN {table} up ON up.id = chain.merged_into_id
        WHERE chain.depth < %s AND NOT up.id = ANY(chain.path)
    )
"""
_SURVIVORS = _CHAIN_UP + "SELECT DISTINCT ON (start_id) start_id, id FROM chain ORDER BY start_id, depth DESC"
# The records merged (transitively) into one person, the person included; bounded and
# cycle-safe as above.
_TREE_DOWN = """
    WITH RECURSIVE tree (id, depth, path) AS (
        SELECT id, 0, ARRAY[id] FROM {table} WHERE id = %s
        UNION ALL
        SELECT down.id, tree.depth + 1, tree.path || down.id
        FROM tree JOIN {table} down ON down.merged_into_id = tree.id
        WHERE tree.depth < %s AND NOT down.id = ANY(tree.path)
    )
    SELECT id FROM tree
"""


def _uuid(value):
    try:
        return MemoryUser._meta.pk.to_python(value)
    except ValidationError:
        return None


def memory_user_survivor_ids(*, ids) -> dict:
    """{id: the id of the person the record was merged into, following the chain to its end
    (A merged into B, later B into C: C), or the id itself when it was not merged} for the
    records of `ids` that exist. One query.

    A merge re-points the records merged into its source, so new chains are one hop deep;
    older data may hold longer ones, and every place that sends a merged record to its
    survivor reads this (or memory_user_resolve_merged) rather than `merged_into`."""
    ids = list({_uuid(pk) for pk in ids} - {None})
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_SURVIVORS.format(table=MemoryUser._meta.db_table), [ids, MERGE_CHAIN_LIMIT])
        return dict(cursor.fetchall())


def memory_user_merge_chain(*, memory_user: MemoryUser) -> list:
    """The record's id, then the id of each record along its chain of merges, the survivor
    last (A merged into B, later B into C: A, B, C). One query, none for a record that was not
    merged."""
    if memory_user.merged_into_id is None:
        return [memory_user.pk]
    with connection.cursor() as cursor:
        cursor.execute(
            _CHAIN_UP.format(table=MemoryUser._meta.db_table) + "SELECT id FROM chain ORDER BY depth",
            [[memory_user.pk], MERGE_CHAIN_LIMIT],
        )
        return [pk for (pk,) in cursor.fetchall()]


def memory_user_resolve_merged(*, memory_user: MemoryUser) -> MemoryUser:
    """The person `memory_user` was (transitively) merged into, or itself: no query for a
    record that was not merged, one otherwise (memory_user_survivor_ids)."""
    if memory_user.merged_into_id is None:
        return memory_user
    survivor = RawSQL(
        _CHAIN_UP.format(table=MemoryUser._meta.db_table)
        + "SELECT id FROM chain ORDER BY depth DESC LIMIT 1",
        ([memory_user.pk], MERGE_CHAIN_LIMIT),
    )
    return MemoryUser.objects.filter(pk__in=survivor).first() or memory_user


def memory_user_merged_ids(*, memory_user: MemoryUser) -> list:
    """The person's id first, then those of every record merged into them, directly or through
    a record merged into them since (older data: A into B, later B into C). One query."""
    with connection.cursor() as cursor:
        cursor.execute(
            _TREE_DOWN.format(table=MemoryUser._meta.db_table), [memory_user.pk, MERGE_CHAIN_LIMIT]
        )
        ids = [pk for (pk,) in cursor.fetchall()]
    return [memory_user.pk, *(pk for pk in ids if pk != memory_user.pk)]


def memory_user_merged_subquery(*, memory_user: MemoryUser) -> RawSQL:
    """memory_user_merged_ids as a subquery (`memory_user_id__in=`), so a lookup by person
    costs no query of its own."""
    return RawSQL(_TREE_DOWN.format(table=MemoryUser._meta.db_table), (memory_user.pk, MERGE_CHAIN_LIMIT))


def memory_user_legal_holds(*, memory_user: MemoryUser) -> list[MemoryUser]:
    """The legal holds that cover the person's data, as the records they were placed on: the
    person's own first, then those of records merged into them, directly or along a chain
    (a merge moves the rows, and such a hold keeps covering them: retention and erasure read
    it), oldest first. The record's `pk` is the hold's `placed_on`."""
    own_first = Case(When(pk=memory_user.pk, then=Value(0)), default=Value(1), output_field=IntegerField())
    return list(
        MemoryUser.objects.filter(pk__in=memory_user_merged_subquery(memory_user=memory_user))
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
