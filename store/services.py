"""Every write of the store: put (upsert), delete, batches of LangGraph ops, vectors, TTL."""

import json
import logging
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.access import Principal, references_resolve, require_write
from core.embeddings import EmbeddingError, embedding_provider_for
from core.errors import ApplicationError, NotFoundError
from core.models import Workspace
from core.services import audit_record, audit_record_deletes
from store.lib.paths import WHOLE_VALUE, path_tokens, texts_at_paths
from store.models import KEY_MAX_LENGTH, LABEL_MAX_LENGTH, NAMESPACE_SEPARATOR, StoreItem, StoreItemEmbedding

logger = logging.getLogger(__name__)

NAMESPACE_EMPTY = "The namespace must have at least one label."
NAMESPACE_LABEL_INVALID = "Namespace labels are non-empty strings without '.' or NUL."
NAMESPACE_LABEL_TOO_LONG = f"A namespace label is longer than {LABEL_MAX_LENGTH} characters."
NAMESPACE_TOO_DEEP = "The namespace has more than {limit} labels."
NAMESPACE_RESERVED = 'The root label "langgraph" is reserved.'
# The unique index holds (workspace, agent, namespace_path, key) in one B-tree entry, at most
# 2,704 bytes: two uuids and the entry's headers leave ~2,640 for the path and key, less when
# PostgreSQL cannot compress them. Past the entry's limit the insert fails as a "program limit"
# error, which reads as the database being down.
NAMESPACE_KEY_MAX_BYTES = 2400
NAMESPACE_KEY_TOO_LONG = (
    f"The namespace and key are too long together: labels, dots and key take more than "
    f"{NAMESPACE_KEY_MAX_BYTES} bytes of UTF-8."
)
KEY_REQUIRED = "key must not be empty."
KEY_TOO_LONG = f"key is longer than {KEY_MAX_LENGTH} characters."
VALUE_NOT_OBJECT = "value must be a JSON object."
VALUE_NOT_FINITE = "value holds a number JSON cannot store (NaN or Infinity, such as 1e400)."
VALUE_TOO_LARGE = "The value is larger than the limit of {limit} bytes."
INDEX_INVALID = 'index must be false, null or a list of JSON paths such as "$", "text" or "items[*].text".'
TTL_INVALID = "ttl must be a positive number of minutes (at most {limit})."
STORE_ITEMS_NOT_FOUND = "Some store items were not found; nothing was deleted."

# Ten years: a TTL past this is no TTL, and timedelta overflows far beyond.
TTL_MAX_MINUTES = 10 * 365 * 24 * 60.0


def _invalid(name: str, message: str, *, status_code: int | None = None, code: str = "invalid"):
    return ApplicationError(message, fields={name: [message]}, status_code=status_code, code=code)


def namespace_clean(namespace, *, name: str = "namespace", allow_empty: bool = False) -> tuple[str, ...]:
    """`namespace` as a tuple of labels, refused as LangGraph refuses it.

    Labels are non-empty strings without "." (the dotted path must name one namespace) or
    NUL; a namespace written to has at least one label and does not start with "langgraph".
    """
    if not isinstance(namespace, list | tuple):
        raise _invalid(name, NAMESPACE_LABEL_INVALID)
    if not namespace and not allow_empty:
        raise _invalid(name, NAMESPACE_EMPTY)
    limit = settings.STORE_NAMESPACE_MAX_DEPTH
    if len(namespace) > limit:
        raise _invalid(name, NAMESPACE_TOO_DEEP.format(limit=limit))
    for label in namespace:
        if not isinstance(label, str) or not label or NAMESPACE_SEPARATOR in label or "\x00" in label:
            raise _invalid(name, NAMESPACE_LABEL_INVALID)
        if len(label) > LABEL_MAX_LENGTH:
            raise _invalid(name, NAMESPACE_LABEL_TOO_LONG)
    return tuple(namespace)


def index_fields_clean(index) -> list[str]:
    """LangGraph's `index` argument as stored: None -> ["$"], False -> [], paths as given."""
    if index is None:
        return [WHOLE_VALUE]
    if index is False:
        return []
    if not isinstance(index, list) or len(index) > settings.STORE_INDEX_MAX_PATHS:
        raise _invalid("index", INDEX_INVALID)
    try:
        for path in index:
            path_tokens(path)
    except ValueError:
        raise _invalid("index", INDEX_INVALID)
    return list(dict.fromkeys(index))


def ttl_clean(ttl) -> float | None:
    if ttl is None:
        return None
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 < ttl <= TTL_MAX_MINUTES
    ):
        raise _invalid("ttl", TTL_INVALID.format(limit=int(TTL_MAX_MINUTES)))
    return float(ttl)


def _value_clean(value) -> str:
    if not isinstance(value, dict):
        raise _invalid("value", VALUE_NOT_OBJECT)
    try:
        # jsonb has no NaN or Infinity, and Python's decoder reads 1e400 as Infinity.
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise _invalid("value", VALUE_NOT_FINITE) from None
    limit = settings.STORE_VALUE_MAX_BYTES
    if len(encoded.encode()) > limit:
        raise _invalid(
            "value", VALUE_TOO_LARGE.format(limit=limit), status_code=413, code="payload_too_large"
        )
    return encoded


def _key_clean(key) -> str:
    if not isinstance(key, str) or not key or "\x00" in key:
        raise _invalid("key", KEY_REQUIRED)
    if len(key) > KEY_MAX_LENGTH:
        raise _invalid("key", KEY_TOO_LONG)
    return key


@dataclass
class PutRequest:
    """One put of a batch, checked: `value` None deletes the item."""

    namespace: tuple[str, ...]
    key: str
    value: dict | None = None
    index: list[str] = field(default_factory=lambda: [WHOLE_VALUE])
    ttl: float | None = None
    encoded: str = ""


def put_request_clean(*, namespace, key, value, index=None, ttl=None) -> PutRequest:
    namespace = namespace_clean(namespace)
    if namespace[0] == "langgraph":
        raise _invalid("namespace", NAMESPACE_RESERVED)
    key = _key_clean(key)
    if len(NAMESPACE_SEPARATOR.join(namespace).encode()) + len(key.encode()) > NAMESPACE_KEY_MAX_BYTES:
        raise _invalid("namespace", NAMESPACE_KEY_TOO_LONG)
    if value is None:
        return PutRequest(namespace=namespace, key=key)
    return PutRequest(
        namespace=namespace,
        key=key,
        value=value,
        index=index_fields_clean(index),
        ttl=ttl_clean(ttl),
        encoded=_value_clean(value),
    )


_UPSERT_SQL = """
INSERT INTO store_storeitem
    (id, workspace_id, agent_id, memory_user_id, namespace, namespace_path, key, value, index_fields,
     search_text, ttl_minutes, expires_at, embedding_model, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s, '', %s, %s)
ON CONFLICT (workspace_id, agent_id, namespace_path, key) DO UPDATE SET
    value = EXCLUDED.value,
    index_fields = EXCLUDED.index_fields,
    search_text = EXCLUDED.search_text,
    ttl_minutes = EXCLUDED.ttl_minutes,
    expires_at = EXCLUDED.expires_at,
    -- An expired item not swept yet is born again: a new item, which is nobody's unless the
    -- put names its person. A live one keeps its person when the put names none.
    memory_user_id = CASE WHEN store_storeitem.expires_at <= EXCLUDED.updated_at
                          THEN EXCLUDED.memory_user_id
                          ELSE coalesce(EXCLUDED.memory_user_id, store_storeitem.memory_user_id) END,
    -- The vector stays valid while the indexed text is the same.
    embedding_model = CASE WHEN store_storeitem.search_text = EXCLUDED.search_text
                           THEN store_storeitem.embedding_model ELSE '' END,
    created_at = CASE WHEN store_storeitem.expires_at <= EXCLUDED.updated_at
                      THEN EXCLUDED.created_at ELSE store_storeitem.created_at END,
    updated_at = EXCLUDED.updated_at
-- created_at equals updated_at only in a row inserted now or born again (a replaced item was
-- created by an earlier put, at an earlier time): both are new items to the caller.
RETURNING id, created_at, embedding_model, (xmax = 0 OR created_at = updated_at) AS inserted
"""


def _upsert(*, workspace, agent, memory_user, put: PutRequest, now: datetime) -> tuple[StoreItem, bool]:
    search_text = "\n".join(texts_at_paths(put.value, put.index)) if put.index else ""
    expires_at = now + timedelta(minutes=put.ttl) if put.ttl is not None else None
    path = NAMESPACE_SEPARATOR.join(put.namespace)
    with connection.cursor() as cursor:
        cursor.execute(
            _UPSERT_SQL,
            [
                uuid.uuid4(),
                workspace.pk,
                agent.pk if agent is not None else None,
                memory_user.pk if memory_user is not None else None,
                list(put.namespace),
                path,
                put.key,
                put.encoded,
                json.dumps(put.index),
                search_text,
                put.ttl,
                expires_at,
                now,
                now,
            ],
        )
        pk, created_at, embedding_model, inserted = cursor.fetchone()
    if not embedding_model:
        StoreItemEmbedding.objects.filter(item_id=pk).delete()
    item = StoreItem(
        id=pk,
        workspace=workspace,
        agent=agent,
        memory_user_id=memory_user.pk if memory_user is not None else None,
        namespace=list(put.namespace),
        namespace_path=path,
        key=put.key,
        value=put.value,
        index_fields=put.index,
        search_text=search_text,
        ttl_minutes=put.ttl,
        expires_at=expires_at,
        embedding_model=embedding_model,
        created_at=created_at,
        updated_at=now,
    )
    item._state.adding = False
    return item, inserted


def _delete(*, workspace, agent, namespace, key: str) -> int:
    path = NAMESPACE_SEPARATOR.join(namespace)
    return (
        StoreItem.objects.filter(workspace=workspace, agent=agent, namespace_path=path, key=key)
        .delete()[1]
        .get("store.StoreItem", 0)
    )


def store_puts_apply(
    *, workspace, agent, puts: list[PutRequest], memory_user=None, wait: bool = False, now=None
) -> list[tuple[StoreItem | None, bool]]:
    """Apply checked puts in one transaction; a later put of the same (namespace, key) wins,
    as in LangGraph's stores. Returns (item or None for a delete, created) per put.

    The items to embed are embedded before returning with `wait`, else by
    `store_item_embed_task` once the transaction commits. A lexical search finds an item
    as soon as it is committed either way.
    """
    now = now or timezone.now()
    last = {(put.namespace, put.key): index for index, put in enumerate(puts)}
    results: list[tuple[StoreItem | None, bool]] = [(None, False)] * len(puts)
    to_embed = []
    with transaction.atomic():
        # Items are locked in one order, (path, key) by code point, which is their bytes' order
        # (store_items_refresh_ttl's): two batches writing the same items in different op
        # orders would otherwise each hold one and wait for the other, a deadlock. The ops are
        # distinct (namespace, key) pairs here, so the order changes no result.
        in_lock_order = sorted(
            last.items(), key=lambda pair: (NAMESPACE_SEPARATOR.join(pair[0][0]), pair[0][1])
        )
        for (_namespace, _key), index in in_lock_order:
            put = puts[index]
            if put.value is None:
                _delete(workspace=workspace, agent=agent, namespace=put.namespace, key=put.key)
                continue
            item, created = _upsert(
                workspace=workspace, agent=agent, memory_user=memory_user, put=put, now=now
            )
            results[index] = (item, created)
            if item.search_text and not item.embedding_model:
                to_embed.append(item.pk)
    if to_embed:
        embedded = False
        if wait:
            try:
                store_items_embed(item_ids=to_embed)
                embedded = True
            except EmbeddingError as exc:
                logger.warning("store: inline embedding failed, left to the task: %s", exc)
        if not embedded:
            from store.tasks import store_item_embed_task

            store_item_embed_task.delay_on_commit([str(pk) for pk in to_embed])
    return results


def store_item_put(
    *, workspace, agent, namespace, key, value, index=None, ttl=None, memory_user=None, wait=False
) -> tuple[StoreItem, bool]:
    """Store `value` at (namespace, key) of the partition; the same place again replaces it."""
    put = put_request_clean(namespace=namespace, key=key, value=value, index=index, ttl=ttl)
    if put.value is None:
        raise _invalid("value", VALUE_NOT_OBJECT)
    ((item, created),) = store_puts_apply(
        workspace=workspace, agent=agent, puts=[put], memory_user=memory_user, wait=wait
    )
    return item, created


def store_item_delete(*, workspace, agent, namespace, key: str, actor: str) -> int:
    """Delete the item at (namespace, key); deleting what is not there is not an error."""
    namespace = namespace_clean(namespace)
    key = _key_clean(key)
    path = NAMESPACE_SEPARATOR.join(namespace)
    with transaction.atomic():
        # (namespace, key) names at most one item of the partition.
        pk = (
            StoreItem.objects.filter(workspace=workspace, agent=agent, namespace_path=path, key=key)
            .values_list("pk", flat=True)
            .first()
        )
        if pk is None:
            return 0
        deleted = StoreItem.objects.filter(pk=pk).delete()[1].get("store.StoreItem", 0)
        if deleted:
            # Named by id, as the item's other audit events are: the trail's entity id holds 64
            # characters, and "namespace/key" is often longer.
            audit_record(
                workspace=workspace,
                actor=actor,
                action="delete",
                entity_type="store_item",
                entity_id=pk,
                changes={
                    "agent": agent.slug if agent is not None else None,
                    "namespace": list(namespace),
                    "key": key,
                },
            )
    return deleted


def store_items_refresh_ttl(*, items, now: datetime | None = None) -> int:
    """Move the expiry of `items` that have a TTL to now + TTL (LangGraph's refresh on read)."""
    ids = [item.pk for item in items if item.ttl_minutes is not None]
    if not ids:
        return 0
    now = now or timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        # Locked in the puts' order (store_puts_apply), so a refresh never waits in a cycle
        # with a batch's puts.
        cursor.execute(
            "UPDATE store_storeitem SET expires_at = %s + ttl_minutes * interval '1 minute' "
            "WHERE id IN (SELECT id FROM store_storeitem WHERE id = ANY(%s) AND ttl_minutes IS NOT NULL "
            'ORDER BY namespace_path COLLATE "C", key COLLATE "C" FOR NO KEY UPDATE)',
            [now, ids],
        )
        touched = cursor.rowcount
    for item in items:
        if item.ttl_minutes is not None:
            item.expires_at = now + timedelta(minutes=item.ttl_minutes)
    return touched


def store_item_update_value(*, item: StoreItem, value: dict, actor: str) -> StoreItem:
    """Replace an item's value by hand (/memories, admin): re-indexed like a put."""
    put = put_request_clean(
        namespace=item.namespace,
        key=item.key,
        value=value,
        index=item.index_fields or False,
        ttl=item.ttl_minutes,
    )
    ((updated, _created),) = store_puts_apply(
        workspace=item.workspace, agent=item.agent, puts=[put], memory_user=item.memory_user
    )
    audit_record(
        workspace=item.workspace,
        actor=actor,
        action="update",
        entity_type="store_item",
        entity_id=item.pk,
        changes={"value": value},
    )
    return updated


def store_items_delete(*, ids, actor: str) -> dict:
    """Delete items by id with their vectors, audited per workspace; no scoping here."""
    with transaction.atomic():
        rows = list(StoreItem.objects.filter(pk__in=ids).values_list("pk", "workspace_id"))
        _total, by_model = StoreItem.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
        by_workspace: dict = {}
        for pk, workspace_id in rows:
            by_workspace.setdefault(workspace_id, []).append(pk)
        for workspace_id, deleted in by_workspace.items():
            audit_record_deletes(
                workspace=Workspace(pk=workspace_id), actor=actor, entity_type="store_item", ids=deleted
            )
    return {"deleted": by_model.get("store.StoreItem", 0)}


def store_item_batch_delete(*, principal: Principal, ids, actor: str | None = None) -> dict:
    """Delete items by id, all or nothing: one id outside the caller's scope is a 404."""
    require_write(principal)
    with transaction.atomic():
        found = references_resolve(
            StoreItem.objects.only("pk"), principal, ids, not_found=NotFoundError(STORE_ITEMS_NOT_FOUND)
        )
        return store_items_delete(ids=[item.pk for item in found], actor=actor or principal.actor)


# --- batches of LangGraph ops -----------------------------------------------------------------


@dataclass
class GetRequest:
    namespace: tuple[str, ...]
    key: str
    refresh_ttl: bool = True


@dataclass
class SearchRequest:
    namespace_prefix: tuple[str, ...]
    query: str | None = None
    filter: dict | None = None
    limit: int = 10
    offset: int = 0
    refresh_ttl: bool = True


@dataclass
class ListNamespacesRequest:
    match_conditions: tuple = ()
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


def store_batch(*, workspace, agent, ops: list, memory_user=None, wait: bool = False) -> list:
    """Run LangGraph ops (GetRequest, SearchRequest, ListNamespacesRequest, PutRequest) in
    one partition; one result per op, in order.

    As in LangGraph's own stores, every read sees the store as it was before the batch's
    puts, which are applied after the reads, in one transaction, the last put of a
    (namespace, key) winning. Reads that ask for it refresh the TTL of what they return.
    """
    from store.selectors import store_item_get, store_item_search, store_namespaces_list

    now = timezone.now()
    results: list = [None] * len(ops)
    refresh: dict = {}
    for index, op in enumerate(ops):
        if isinstance(op, GetRequest):
            item = store_item_get(
                workspace=workspace, agent=agent, namespace=op.namespace, key=op.key, now=now
            )
            results[index] = item
            if item is not None and op.refresh_ttl:
                refresh[item.pk] = item
        elif isinstance(op, SearchRequest):
            hits = store_item_search(
                workspace=workspace,
                agent=agent,
                namespace_prefix=op.namespace_prefix,
                query=op.query,
                filter=op.filter,
                limit=op.limit,
                offset=op.offset,
                now=now,
            )
            results[index] = hits
            if op.refresh_ttl:
                refresh.update((item.pk, item) for item, _score in hits)
        elif isinstance(op, ListNamespacesRequest):
            results[index] = store_namespaces_list(
                workspace=workspace,
                agent=agent,
                match_conditions=op.match_conditions,
                max_depth=op.max_depth,
                limit=op.limit,
                offset=op.offset,
                now=now,
            )
    puts = [(index, op) for index, op in enumerate(ops) if isinstance(op, PutRequest)]
    # Committed on their own: held until the puts commit, the read items' locks would make a
    # batch that reads x and writes y wait in a cycle with one that reads y and writes x.
    if refresh:
        store_items_refresh_ttl(items=list(refresh.values()), now=now)
    if puts:
        store_puts_apply(
            workspace=workspace, agent=agent, puts=[op for _, op in puts], memory_user=memory_user, wait=wait
        )
    return results


# --- vectors and expiry ------------------------------------------------------------------------


def store_items_embed(*, item_ids, provider=None) -> int:
    """Store vectors of the items of `item_ids` that lack one under the current model.

    Idempotent: items embedded with the model are skipped, an item whose indexed text
    changed meanwhile is skipped (its put queued its own embedding), and the unique
    (item, model) constraint absorbs a concurrent run. Returns rows written.
    """
    items = list(
        StoreItem.objects.filter(pk__in=list(item_ids))
        .exclude(search_text="")
        .select_related("workspace")
        .only("pk", "workspace", "agent_id", "search_text")
    )
    by_workspace: dict = {}
    for item in items:
        by_workspace.setdefault(item.workspace_id, []).append(item)
    written = 0
    for group in by_workspace.values():
        group_provider = provider or embedding_provider_for(group[0].workspace)
        model = group_provider.model_name
        done = set(
            StoreItemEmbedding.objects.filter(item__in=group, model=model).values_list("item_id", flat=True)
        )
        todo = [item for item in group if item.pk not in done]
        if not todo:
            continue
        vectors = group_provider.embed([item.search_text for item in todo])
        with transaction.atomic():
            # Locked in pk order until the vectors commit, so two batches never deadlock.
            current = dict(
                StoreItem.objects.filter(pk__in=[item.pk for item in todo])
                .order_by("pk")
                .select_for_update(no_key=True)
                .values_list("pk", "search_text")
            )
            rows = [
                StoreItemEmbedding(
                    item_id=item.pk,
                    workspace_id=item.workspace_id,
                    agent_id=item.agent_id,
                    model=model,
                    dimensions=len(vector),
                    embedding=vector,
                )
                for item, vector in zip(todo, vectors, strict=True)
                if current.get(item.pk) == item.search_text
            ]
            StoreItemEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
            StoreItem.objects.filter(pk__in=[row.item_id for row in rows]).update(embedding_model=model)
        written += len(rows)
    return written


def store_items_embed_sweep(*, limit: int, before) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of indexed items last written before `before` with no
    vector (core.lib.sweep.sweep_take's order): what a lost or failed task left behind."""
    from django.db.models import Exists, OuterRef

    from core.lib.sweep import sweep_take

    has_vector = StoreItemEmbedding.objects.filter(item=OuterRef("pk"))
    missing = (
        StoreItem.objects.exclude(search_text="")
        .filter(updated_at__lt=before)
        .filter(~Exists(has_vector))
        .defer("search_vector")
    )
    return sweep_take(missing, limit=limit)


def store_items_sweep_expired(*, now: datetime | None = None) -> int:
    """Delete items whose TTL ran out, in batches of STORE_SWEEP_BATCH; returns how many."""
    now = now or timezone.now()
    batch = settings.STORE_SWEEP_BATCH
    deleted = 0
    while True:
        with transaction.atomic():
            # Locked before they are deleted: Django deletes the chosen rows by id alone, so a
            # put reviving an item between the choice and the delete lost its value. A put now
            # waits for the delete and inserts the item anew. Items a put holds are skipped
            # (the next sweep takes them if still expired): waiting for them, the sweep would
            # deadlock with the put, which waits for the vectors deleted here first.
            ids = list(
                StoreItem.objects.filter(expires_at__lte=now)
                .order_by("expires_at")
                .select_for_update(skip_locked=True)
                .values_list("pk", flat=True)[:batch]
            )
            if not ids:
                return deleted
            deleted += StoreItem.objects.filter(pk__in=ids).delete()[1].get("store.StoreItem", 0)
