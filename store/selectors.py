"""Every read of the store: partitions, items by (namespace, key), search, namespaces, lists.

A partition is an agent's items or the workspace's (agent NULL); `store_partition` names
the one a request acts in, and every read below takes it, never widening to another.
Expired items (TTL run out, not swept yet) are never returned.
"""

import itertools
import re
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from core.access import Principal, agent_resolve_optional, scope_to_principal
from core.errors import NotFoundError
from core.filters import filterset_apply
from core.lib.replica import read_connection
from core.ranking import MODE_HYBRID, Corpus, hybrid_search, mode_weights, query_clean, query_vector_for
from store.filters import (
    StoreItemFilter,
    namespace_paths_under,
    namespace_prefix_q,
    value_filter_pairs,
    value_filter_q,
)
from store.models import NAMESPACE_SEPARATOR, StoreItem

STORE_ITEM_NOT_FOUND = "Store item not found."
# A value filter's pairs are looked up in the value index (store 0005) when the prefix holds at
# least this many items; under it, testing the prefix's own items costs less than reading the
# index's postings of a common pair (docs/speed.md, "The store searched by value").
STORE_VALUE_INDEX_FROM = 1000
_SCOPE_CLOCK = "now"


def store_partition(*, principal: Principal, agent: str | None, create: bool = False):
    """The agent whose partition a request acts in, or None for the workspace's.

    An agent-bound key always acts in its agent's partition (naming another agent is a
    404); a workspace key acts in the workspace's unless it names an agent.
    """
    return agent_resolve_optional(principal, agent or None, create=create)


def store_partition_queryset(*, workspace, agent, now: datetime | None = None):
    return StoreItem.objects.filter(workspace=workspace, agent=agent).live(now)


def store_item_get(*, workspace, agent, namespace, key: str, now: datetime | None = None) -> StoreItem | None:
    path = NAMESPACE_SEPARATOR.join(namespace)
    return (
        store_partition_queryset(workspace=workspace, agent=agent, now=now)
        .defer("search_vector")
        .filter(namespace_path=path, key=key)
        .first()
    )


def _scope_sql(queryset, *, now: datetime) -> tuple[str, dict]:
    """`queryset`'s ids as SQL with named parameters, for core.ranking's Corpus.

    The clock its expiry test reads (`now`, the very object) is named `now`, which the
    Corpus leaves out of its memos' keys: every search has its own.
    """
    sql, params = queryset.order_by().values("id").query.sql_with_params()
    names = [_SCOPE_CLOCK if value is now else f"scope_{i}" for i, value in enumerate(params)]
    counter = iter(names)
    named = re.sub(r"(?<!%)%s", lambda _match: f"%({next(counter)})s", sql)
    return named, dict(zip(names, params, strict=True))


def _prefix_holds_many(*, workspace, agent, namespace_prefix) -> bool:
    """Whether the partition holds `STORE_VALUE_INDEX_FROM` items or more under the prefix.

    Counted on the partition's unique index as one range of paths, which stops once the
    number is reached (0.2-0.3 ms). It may count items the search would not (expired ones,
    the siblings the range holds): enough to choose a plan by.
    """
    sql = "SELECT count(*) FROM (SELECT 1 FROM store_storeitem WHERE workspace_id = %s AND "
    params = [workspace.pk]
    if agent is None:
        sql += "agent_id IS NULL"
    else:
        sql += "agent_id = %s"
        params.append(agent.pk)
    if namespace_prefix:
        sql += " AND namespace_path >= %s AND namespace_path < %s"
        params += namespace_paths_under(namespace_prefix)
    with read_connection(StoreItem).cursor() as cursor:
        cursor.execute(sql + " LIMIT %s) under_prefix", [*params, STORE_VALUE_INDEX_FROM])
        return cursor.fetchone()[0] >= STORE_VALUE_INDEX_FROM


def store_item_search(
    *,
    workspace,
    agent,
    namespace_prefix=(),
    query: str | None = None,
    filter: dict | None = None,
    limit: int = 10,
    offset: int = 0,
    now: datetime | None = None,
    provider=None,
) -> list[tuple[StoreItem, float | None]]:
    """Items under `namespace_prefix` matching `filter`, as (item, score) pairs.

    Without a query: newest update first, score None. With one: ranked by
    core.ranking's hybrid search (BM25 over the indexed text, cosine of the item's vector,
    recency of its last update), as episodic memory ranks entries; items the query does not
    reach (not indexed, no shared word, no vector yet) follow unscored, newest first, as
    LangGraph's stores fill a page with unscored items.
    """
    now = now or timezone.now()
    condition = namespace_prefix_q(namespace_prefix) & value_filter_q(filter)
    pairs = value_filter_pairs(filter)
    if pairs and _prefix_holds_many(workspace=workspace, agent=agent, namespace_prefix=namespace_prefix):
        condition &= Q(value__contains=pairs)
    scope = store_partition_queryset(workspace=workspace, agent=agent, now=now).filter(condition)
    query = (query or "").strip()
    if not query:
        page = scope.defer("search_vector").order_by("-updated_at", "namespace_path", "key")
        return [(item, None) for item in page[offset : offset + limit]]

    query = query_clean(query)
    weights = mode_weights(MODE_HYBRID, None, top_k=offset + limit)
    query_vector, model = query_vector_for(
        workspace=workspace, query=query, weights=weights, provider=provider
    )
    scope_sql, params = _scope_sql(scope, now=now)
    params["workspace"] = workspace.pk
    corpus = Corpus(
        rows_model=StoreItem,
        # The indexed items only: one put with `index=False` holds no words, and counted among
        # BM25's documents it would shrink the average length every match is weighed against.
        lexical_scope_sql=(
            "SELECT id, search_vector AS tsv, updated_at AS created_at FROM store_storeitem "
            f"WHERE workspace_id = %(workspace)s AND search_text <> '' AND id IN ({scope_sql})"
        ),
        scope_size_sql=(
            "SELECT count(*) FROM (SELECT 1 FROM store_storeitemembedding "
            f"WHERE workspace_id = %(workspace)s AND model = %(model)s AND item_id IN ({scope_sql}) "
            "LIMIT %(count_cap)s) capped"
        ),
        vector_table="store_storeitemembedding",
        vector_id_column="item_id",
        vector_scope_where=f"workspace_id = %(workspace)s AND item_id IN ({scope_sql})",
        graph_scope=(("workspace_id", "workspace"),),
        describe_sql=(
            "SELECT i.id, extract(epoch FROM i.updated_at)::float8, NULL, NULL, NULL, NULL, "
            "1 - (v.embedding <=> %(qvec)s::vector), NULL, NULL::text, NULL::uuid "
            "FROM store_storeitem i LEFT JOIN store_storeitemembedding v "
            "ON v.item_id = i.id AND v.model = %(model)s WHERE i.id = ANY(%(ids)s)"
        ),
        params=params,
        # The scope filters on JSON: read it once per search. Inline, the match may go through
        # the text index, whose postings are every workspace's (docs/speed.md, "The store
        # searched by meaning across many namespaces").
        lexical_materialized=True,
        memo_ignored=(_SCOPE_CLOCK,),
    )
    outcome = hybrid_search(
        corpus=corpus, query=query, query_vector=query_vector, model=model or "", weights=weights, now=now
    )
    ranked = [(candidate.id, score) for candidate, score in outcome.ranked if candidate.rankable]
    page = ranked[offset : offset + limit]
    items = scope.defer("search_vector").in_bulk([item_id for item_id, _ in page])
    hits = [(items[item_id], score) for item_id, score in page if item_id in items]
    if len(hits) < limit:
        # Unscored items fill the page after every scored one (offset counts both).
        skip = max(0, offset - len(ranked))
        rest = scope.defer("search_vector").exclude(pk__in=[item_id for item_id, _ in ranked])
        rest = rest.order_by("-updated_at", "namespace_path", "key")[skip : skip + limit - len(hits)]
        hits.extend((item, None) for item in rest)
    return hits


# Namespaces are listed by a loose scan of the partition's unique index (workspace, agent,
# namespace_path, key): each step reads the first live item past the previous namespace, a probe
# a namespace instead of a read of every item. Past this many namespaces (a namespace an item,
# say) reading every item costs less, and the listing does that instead.
NAMESPACES_WALK_MAX = 2000

# ORDER BY names the index's columns: `agent_id IS NULL` alone does not tell PostgreSQL that the
# index is in path order. At least one row comes back, `walked` the namespaces the scan read.
_NAMESPACES_WALK_SQL = """
WITH RECURSIVE namespaces(path, namespace, step) AS (
    (SELECT namespace_path, namespace, 1 FROM store_storeitem
     WHERE {partition}{path_range}
     ORDER BY workspace_id, agent_id, namespace_path LIMIT 1)
    UNION ALL
    SELECT following.namespace_path, following.namespace, namespaces.step + 1
    FROM namespaces CROSS JOIN LATERAL (
        SELECT namespace_path, namespace FROM store_storeitem
        WHERE {partition}{path_range} AND namespace_path > namespaces.path
        ORDER BY workspace_id, agent_id, namespace_path LIMIT 1
    ) following
    WHERE namespaces.step < %(walk_max)s
),
walked AS (SELECT count(*) AS namespaces FROM namespaces)
SELECT page.ns, walked.namespaces FROM walked LEFT JOIN LATERAL (
    SELECT ns, row_number() OVER (ORDER BY ns) AS position FROM (
        {page}
    ) listed
) page ON TRUE
ORDER BY page.position
"""
# Past the walk's limit: the partition's distinct paths read item by item, grouped as text in
# byte order, each path's labels split from it (labels hold no "."). Grouping the label arrays
# by the database's collation instead took 130 of 138 ms at 100,000 items.
_NAMESPACES_READ_SQL = """
WITH namespaces AS (
    SELECT string_to_array(namespace_path, %(separator)s) AS namespace FROM store_storeitem
    WHERE {partition}{path_range}
    GROUP BY namespace_path
)
{page}
"""
# Byte order of the labels, the order LangGraph's stores sort namespace tuples in (not the
# paths' order: "a-x" sorts before "a.b", but ("a", "b") before ("a-x",)). Namespaces cut to a
# depth are grouped in it too, so one cheap sort serves both; whole ones are distinct already.
_NAMESPACES_PAGE_SQL = """
SELECT ns FROM (SELECT {column} COLLATE "C" AS ns FROM namespaces WHERE TRUE{conditions}) found
{group}ORDER BY ns
LIMIT %(limit)s OFFSET %(offset)s
"""


def store_namespaces_list(
    *,
    workspace,
    agent,
    match_conditions=(),
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
    now: datetime | None = None,
) -> list[tuple[str, ...]]:
    """The distinct namespaces of a partition, sorted, cut to `max_depth` labels.

    `match_conditions` are (match_type, path) pairs, "prefix" or "suffix", where a "*"
    label matches any label; a namespace must match all of them.
    """
    params: dict = {
        "workspace": workspace.pk,
        "now": now or timezone.now(),
        "limit": limit,
        "offset": offset,
    }
    partition = "workspace_id = %(workspace)s AND agent_id IS NULL"
    if agent is not None:
        partition = "workspace_id = %(workspace)s AND agent_id = %(agent)s"
        params["agent"] = agent.pk
    partition += " AND (expires_at IS NULL OR expires_at > %(now)s)"
    path_range = ""
    matches = []
    for n, (match_type, path) in enumerate(match_conditions or ()):
        matches.append(f"cardinality(namespace) >= {len(path)}")
        for i, label in enumerate(path):
            if label == "*":
                continue
            name = f"c{n}_{i}"
            params[name] = label
            if match_type == "prefix":
                position = str(i + 1)
            else:
                position = f"cardinality(namespace) - {len(path) - i - 1}"
            matches.append(f"namespace[{position}] = %({name})s")
        leading = list(itertools.takewhile(lambda label: label != "*", path))
        if match_type == "prefix" and leading and not path_range:
            # The label conditions above drop the siblings the range holds.
            params["path_from"], params["path_to"] = namespace_paths_under(leading)
            path_range = " AND namespace_path >= %(path_from)s AND namespace_path < %(path_to)s"
    column = "namespace"
    if max_depth is not None:
        params["depth"] = max_depth
        column = "namespace[1:%(depth)s]"
    parts = {
        "partition": partition,
        "path_range": path_range,
        "page": _NAMESPACES_PAGE_SQL.format(
            column=column,
            conditions="".join(f" AND {match}" for match in matches),
            group="GROUP BY ns\n" if max_depth is not None else "",
        ),
    }
    params["walk_max"] = NAMESPACES_WALK_MAX
    params["separator"] = NAMESPACE_SEPARATOR
    with read_connection(StoreItem).cursor() as cursor:
        cursor.execute(_NAMESPACES_WALK_SQL.format(**parts), params)
        rows = cursor.fetchall()
        if rows[0][1] < NAMESPACES_WALK_MAX:
            return [tuple(ns) for ns, _walked in rows if ns is not None]
        cursor.execute(_NAMESPACES_READ_SQL.format(**parts), params)
        return [tuple(row[0]) for row in cursor.fetchall()]


# --- lists of the browser, the admin and the API ------------------------------------------------


def store_item_scoped_queryset(*, principal: Principal):
    # Expired items are gone for every reader, as for get, search and namespaces, though the
    # sweep has not deleted them yet.
    return scope_to_principal(StoreItem.objects.live(), principal)


def store_item_list(*, principal: Principal, filters=None):
    queryset = store_item_scoped_queryset(principal=principal).defer("search_vector").select_related("agent")
    return filterset_apply(StoreItemFilter, filters, queryset).order_by("-updated_at", "pk")


def store_item_get_by_id(*, principal: Principal, item_id) -> StoreItem:
    item = (
        store_item_scoped_queryset(principal=principal)
        .select_related("agent", "memory_user")
        .filter(pk=item_id)
        .first()
    )
    if item is None:
        raise NotFoundError(STORE_ITEM_NOT_FOUND)
    return item
