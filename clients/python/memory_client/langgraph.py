"""A LangGraph checkpoint saver that stores checkpoints in the memory server.

>>> from memory_client.langgraph import MemoryServerSaver
>>> saver = MemoryServerSaver("http://127.0.0.1:8000", api_key="mem_...", agent="support-bot")
>>> graph = builder.compile(checkpointer=saver)
>>> graph.invoke(inputs, {"configurable": {"thread_id": "ticket-42"}})

LangGraph's ``thread_id`` is any client string; the saver maps it to a server thread of
`agent` through ``POST /threads/`` with ``resolve=true`` and ``client_key=<thread_id>``
(find-or-create, cached per saver). Checkpoints and pending writes are serialized with the
saver's serde (LangGraph's JsonPlus by default) and sent as ``{"type", "data": base64}``.
Because the state lives in the server, a later process (another worker, a restarted
service) resumes an interrupted graph from where it stopped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from memory_client._core import RetryPolicy
from memory_client.client import AsyncMemoryClient, LazyClients, MemoryClient
from memory_client.errors import NotFoundError

# The server caps a list page; list() pages through with this size.
_LIST_PAGE = 100
# How long put_writes waits for the put of its checkpoint (running concurrently) to land.
WRITES_WAIT_SECONDS = 10.0


def _encode(typed: tuple[str, bytes]) -> dict[str, str]:
    kind, data = typed
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def _decode(blob: dict[str, Any]) -> tuple[str, bytes]:
    return blob["type"], base64.b64decode(blob.get("data") or "")


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    # Metadata is stored as JSON so the server can filter on it; anything exotic becomes text.
    return json.loads(json.dumps(metadata, default=str))


class MemoryServerSaver(LazyClients, BaseCheckpointSaver[str]):
    """Sync and async LangGraph checkpointer over the memory server's checkpoint API."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        agent: str | None = None,
        serde: SerializerProtocol | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        client: MemoryClient | None = None,
        async_client: AsyncMemoryClient | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.agent = agent
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout
        self._retry = retry
        self._client = client
        self._async_client = async_client
        self._threads: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- clients and thread mapping ---------------------------------------------------

    def _resolve_body(self, thread_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {"client_key": thread_id}
        if self.agent:
            body["agent"] = self.agent
        return body

    def server_thread_id(self, thread_id: str) -> str:
        """The server thread behind a LangGraph thread id (found or created once, then cached)."""
        cached = self._threads.get(thread_id)
        if cached is not None:
            return cached
        thread = self.client.threads.resolve(**self._resolve_body(thread_id))
        with self._lock:
            self._threads[thread_id] = str(thread["id"])
        return str(thread["id"])

    async def aserver_thread_id(self, thread_id: str) -> str:
        cached = self._threads.get(thread_id)
        if cached is not None:
            return cached
        thread = await self.async_client.threads.resolve(**self._resolve_body(thread_id))
        with self._lock:
            self._threads[thread_id] = str(thread["id"])
        return str(thread["id"])

    # -- conversions -----------------------------------------------------------------

    def _put_body(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[str, str, dict[str, Any]]:
        configurable = config["configurable"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        body = {
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": configurable.get("checkpoint_id"),
            "checkpoint": _encode(self.serde.dumps_typed(checkpoint)),
            "metadata": _json_safe(dict(get_serializable_checkpoint_metadata(config, metadata))),
        }
        return configurable["thread_id"], checkpoint_ns, body

    def _writes_body(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ):
        configurable = config["configurable"]
        encoded = [
            {
                "idx": WRITES_IDX_MAP.get(channel, idx),
                "channel": channel,
                "value": _encode(self.serde.dumps_typed(value)),
            }
            for idx, (channel, value) in enumerate(writes)
        ]
        body = {
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "task_id": task_id,
            "task_path": task_path,
            "writes": encoded,
        }
        return configurable["thread_id"], configurable["checkpoint_id"], body

    def _tuple(self, thread_id: str, row: dict[str, Any]) -> CheckpointTuple:
        checkpoint_ns = row.get("checkpoint_ns", "")
        checkpoint: Checkpoint = self.serde.loads_typed(_decode(row["checkpoint"]))
        writes = sorted(
            row.get("pending_writes") or [],
            key=lambda w: (w.get("task_path", ""), w["task_id"], w.get("idx", 0)),
        )
        parent_id = row.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": row["checkpoint_id"],
                }
            },
            checkpoint=checkpoint,
            metadata=row.get("metadata") or {},
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": checkpoint_ns,
                        "checkpoint_id": parent_id,
                    }
                }
                if parent_id
                else None
            ),
            pending_writes=[
                (w["task_id"], w["channel"], self.serde.loads_typed(_decode(w["value"]))) for w in writes
            ],
        )

    @staticmethod
    def _list_params(config, filter, before, limit) -> dict[str, Any]:
        configurable = (config or {}).get("configurable", {})
        return {
            "checkpoint_ns": configurable.get("checkpoint_ns"),
            # A config naming a checkpoint lists that one (the server filters, so `limit`
            # counts it and not the newest rows).
            "checkpoint_id": get_checkpoint_id(config) if config else None,
            "before": get_checkpoint_id(before) if before else None,
            "metadata": filter or None,
            "limit": limit,
        }

    # -- sync API --------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = config["configurable"]["thread_id"]
        checkpoint_ns = config["configurable"].get("checkpoint_ns", "")
        server_id = self.server_thread_id(thread_id)
        checkpoint_id = get_checkpoint_id(config)
        try:
            if checkpoint_id:
                row = self.client.checkpoints.get(server_id, checkpoint_id, checkpoint_ns=checkpoint_ns)
            else:
                row = self.client.checkpoints.latest(server_id, checkpoint_ns=checkpoint_ns)
        except NotFoundError:
            return None
        return self._tuple(thread_id, row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None:
            raise ValueError("MemoryServerSaver.list needs a config with a thread_id.")
        thread_id = config["configurable"]["thread_id"]
        server_id = self.server_thread_id(thread_id)
        params = self._list_params(config, filter, before, limit)
        remaining = limit
        if remaining is not None and remaining <= 0:
            return  # As LangGraph's SQL savers answer LIMIT 0.
        while True:
            page_limit = _LIST_PAGE if remaining is None else min(_LIST_PAGE, remaining)
            params["limit"] = page_limit
            rows = _rows(self.client.checkpoints.list(server_id, **params))
            for row in rows:
                yield self._tuple(thread_id, row)
            if remaining is not None:
                remaining -= len(rows)
            if len(rows) < page_limit or (remaining is not None and remaining <= 0):
                return
            params["before"] = rows[-1]["checkpoint_id"]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, checkpoint_ns, body = self._put_body(config, checkpoint, metadata)
        self.client.checkpoints.put(self.server_thread_id(thread_id), **body)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        thread_id, checkpoint_id, body = self._writes_body(config, writes, task_id, task_path)
        server_id = self.server_thread_id(thread_id)
        deadline = time.monotonic() + WRITES_WAIT_SECONDS
        delay = 0.01
        while True:
            try:
                self.client.checkpoints.put_writes(server_id, checkpoint_id, **body)
                return
            except NotFoundError:
                # LangGraph submits put_writes and the put of their checkpoint to separate
                # executor threads, so the writes may arrive first; wait for the put to land.
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def delete_thread(self, thread_id: str) -> None:
        self.client.checkpoints.delete_thread(self.server_thread_id(thread_id))

    # -- async API -------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = config["configurable"]["thread_id"]
        checkpoint_ns = config["configurable"].get("checkpoint_ns", "")
        server_id = await self.aserver_thread_id(thread_id)
        checkpoint_id = get_checkpoint_id(config)
        try:
            if checkpoint_id:
                row = await self.async_client.checkpoints.get(
                    server_id, checkpoint_id, checkpoint_ns=checkpoint_ns
                )
            else:
                row = await self.async_client.checkpoints.latest(server_id, checkpoint_ns=checkpoint_ns)
        except NotFoundError:
            return None
        return self._tuple(thread_id, row)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None:
            raise ValueError("MemoryServerSaver.alist needs a config with a thread_id.")
        thread_id = config["configurable"]["thread_id"]
        server_id = await self.aserver_thread_id(thread_id)
        params = self._list_params(config, filter, before, limit)
        remaining = limit
        if remaining is not None and remaining <= 0:
            return  # As LangGraph's SQL savers answer LIMIT 0.
        while True:
            page_limit = _LIST_PAGE if remaining is None else min(_LIST_PAGE, remaining)
            params["limit"] = page_limit
            rows = _rows(await self.async_client.checkpoints.list(server_id, **params))
            for row in rows:
                yield self._tuple(thread_id, row)
            if remaining is not None:
                remaining -= len(rows)
            if len(rows) < page_limit or (remaining is not None and remaining <= 0):
                return
            params["before"] = rows[-1]["checkpoint_id"]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, checkpoint_ns, body = self._put_body(config, checkpoint, metadata)
        await self.async_client.checkpoints.put(await self.aserver_thread_id(thread_id), **body)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        thread_id, checkpoint_id, body = self._writes_body(config, writes, task_id, task_path)
        server_id = await self.aserver_thread_id(thread_id)
        deadline = time.monotonic() + WRITES_WAIT_SECONDS
        delay = 0.01
        while True:
            try:
                await self.async_client.checkpoints.put_writes(server_id, checkpoint_id, **body)
                return
            except NotFoundError:
                # See put_writes: the checkpoint's put may still be in flight.
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.async_client.checkpoints.delete_thread(await self.aserver_thread_id(thread_id))

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        # Zero-padded counter plus a random suffix: string-ordered and unique across
        # concurrent writers, the scheme LangGraph's PostgresSaver uses.
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


def _rows(page: Any) -> list[dict[str, Any]]:
    if isinstance(page, dict):
        return list(page.get("results", []))
    return list(page)


__all__ = ["MemoryServerSaver"]
