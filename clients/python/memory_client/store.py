"""A LangGraph long-term store (``BaseStore``) kept in the memory server.

>>> from memory_client.store import MemoryServerStore
>>> store = MemoryServerStore("http://127.0.0.1:8000", api_key="mem_...", agent="support-bot")
>>> graph = builder.compile(checkpointer=saver, store=store)
>>> store.put(("memories", "ada"), "city", {"text": "Ada lives in Lisbon."})
>>> store.search(("memories", "ada"), query="where does she live?")

Every operation goes through ``POST /api/v1/store/batch/``, one request per ``batch`` call
(split past the server's 500 ops). Items live in a partition of the server: the agent
named here (or the agent of an agent-bound key), else the workspace's own.

Semantic search is the server's: it embeds with the workspace's embedding model and ranks
with the same hybrid ranking as episodic memory, so ``index`` takes only ``fields``
(``dims`` and ``embed`` are the server's business and are ignored). Puts wait for their
vectors by default (``wait_for_index=True``), so a search right after a put finds the
item by meaning; with False a worker embeds them moments later, and until then a search
finds them by their words. TTLs are in minutes, refreshed on reads as LangGraph defines
(``ttl={"default_ttl": ..., "refresh_on_read": ...}``); the server sweeps expired items
and never returns one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from memory_client._core import Request, RetryPolicy
from memory_client.client import AsyncMemoryClient, LazyClients, MemoryClient

# The server's STORE_BATCH_MAX_OPS default; larger batches are sent in chunks of this size.
BATCH_MAX_OPS = 500


def _labels_check(namespace: tuple[str, ...]) -> None:
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels are non-empty strings "
                "without '.' or NUL."
            )


def _op_check(op: Op) -> None:
    """Refuse what LangGraph's BaseStore methods refuse, for ops handed to batch() directly."""
    if isinstance(op, GetOp | PutOp):
        _labels_check(op.namespace)
    elif isinstance(op, SearchOp):
        _labels_check(op.namespace_prefix)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            for label in condition.path:
                if label != "*":
                    _labels_check((label,))
    if isinstance(op, PutOp):
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if op.namespace[0] == "langgraph":
            raise InvalidNamespaceError(
                f'Root label for namespace cannot be "langgraph". Got: {op.namespace}'
            )


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _item(row: dict[str, Any] | None) -> Item | None:
    if row is None:
        return None
    return Item(
        value=row["value"],
        key=row["key"],
        namespace=tuple(row["namespace"]),
        created_at=_time(row["created_at"]),
        updated_at=_time(row["updated_at"]),
    )


def _search_item(row: dict[str, Any]) -> SearchItem:
    return SearchItem(
        namespace=tuple(row["namespace"]),
        key=row["key"],
        value=row["value"],
        created_at=_time(row["created_at"]),
        updated_at=_time(row["updated_at"]),
        score=row.get("score"),
    )


class MemoryServerStore(LazyClients, BaseStore):
    """Sync and async LangGraph store over the memory server's store API."""

    supports_ttl = True

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        agent: str | None = None,
        memory_user: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        wait_for_index: bool = True,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        client: MemoryClient | None = None,
        async_client: AsyncMemoryClient | None = None,
    ) -> None:
        self.agent = agent
        self.memory_user = memory_user
        self.index_config = index
        self.ttl_config = ttl
        self.wait_for_index = wait_for_index
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout
        self._retry = retry
        self._client = client
        self._async_client = async_client

    # -- clients ---------------------------------------------------------------------------

    def __enter__(self) -> MemoryServerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- encoding --------------------------------------------------------------------------

    def _default_index(self) -> list[str] | None:
        if self.index_config and self.index_config.get("fields"):
            return list(self.index_config["fields"])
        return None

    def _encode(self, op: Op) -> dict[str, Any]:
        if isinstance(op, GetOp):
            return {
                "op": "get",
                "namespace": list(op.namespace),
                "key": op.key,
                "refresh_ttl": op.refresh_ttl,
            }
        if isinstance(op, PutOp):
            index = self._default_index() if op.index is None else op.index
            return {
                "op": "put",
                "namespace": list(op.namespace),
                "key": op.key,
                "value": None if op.value is None else dict(op.value),
                "index": index,
                "ttl": op.ttl,
            }
        if isinstance(op, SearchOp):
            return {
                "op": "search",
                "namespace_prefix": list(op.namespace_prefix),
                "query": op.query,
                "filter": op.filter,
                "limit": op.limit,
                "offset": op.offset,
                "refresh_ttl": op.refresh_ttl,
            }
        if isinstance(op, ListNamespacesOp):
            conditions = [
                {"match_type": condition.match_type, "path": list(condition.path)}
                for condition in op.match_conditions or ()
            ]
            return {
                "op": "list_namespaces",
                "match_conditions": conditions,
                "max_depth": op.max_depth,
                "limit": op.limit,
                "offset": op.offset,
            }
        raise ValueError(f"Unknown operation type: {type(op)}")

    def _requests(self, ops: Iterable[Op]) -> tuple[list[Op], list[Request]]:
        ops = list(ops)
        for op in ops:
            _op_check(op)
        requests = []
        for start in range(0, len(ops), BATCH_MAX_OPS):
            chunk = ops[start : start + BATCH_MAX_OPS]
            body: dict[str, Any] = {"ops": [self._encode(op) for op in chunk]}
            if self.agent:
                body["agent"] = self.agent
            if any(isinstance(op, PutOp) for op in chunk):
                body["wait"] = self.wait_for_index
                if self.memory_user:
                    body["memory_user"] = self.memory_user
            # Reads are safe to repeat; so are puts (upserts) and deletes of one batch.
            requests.append(Request("POST", "store/batch/", json=body, idempotent=True))
        return ops, requests

    @staticmethod
    def _decode(ops: list[Op], results: list[Any]) -> list[Result]:
        decoded: list[Result] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, GetOp):
                decoded.append(_item(result))
            elif isinstance(op, SearchOp):
                decoded.append([_search_item(row) for row in result])
            elif isinstance(op, ListNamespacesOp):
                decoded.append([tuple(namespace) for namespace in result])
            else:
                decoded.append(None)
        return decoded

    # -- BaseStore ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops, requests = self._requests(ops)
        results: list[Any] = []
        for request in requests:
            results.extend(self.client.transport.send(request)["results"])
        return self._decode(ops, results)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops, requests = self._requests(ops)
        results: list[Any] = []
        for request in requests:
            results.extend((await self.async_client.transport.send(request))["results"])
        return self._decode(ops, results)
