"""`MemoryClient` (sync) and `AsyncMemoryClient` (asyncio), both on httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import httpx

from memory_client import resources
from memory_client._core import DEFAULT_TIMEOUT, AsyncTransport, RetryPolicy, SyncTransport

DEFAULT_PAGE_SIZE = 100


class _Resources:
    def _bind(self, run: Callable[..., Any]) -> None:
        self.agents = resources.Agents(run)
        self.threads = resources.Threads(run)
        self.checkpoints = resources.Checkpoints(run)
        self.facts = resources.Facts(run)
        self.episodes = resources.Episodes(run)
        self.procedures = resources.Procedures(run)
        self.memory_users = resources.MemoryUsers(run)
        self.retention = resources.Retention(run)
        self.evidence = resources.Evidence(run)
        self.episodic_entries = resources.EpisodicEntries(run)
        self.memory = resources.Memory(run)
        self.context = resources.Context(run)
        self.review = resources.Review(run)
        self.reflection = resources.Reflection(run)
        self.webhooks = resources.Webhooks(run)
        self.store = resources.Store(run)
        self.portability = resources.Portability(run)


class MemoryClient(_Resources):
    """A synchronous client.

    >>> client = MemoryClient("http://127.0.0.1:8000", api_key="mem_...")
    >>> user = client.memory_users.identify(channel="telegram", external_id="12345")
    >>> for fact in client.paginate(client.facts.list, memory_user=user["id"]):
    ...     print(fact["key"], fact["value"])
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.transport = SyncTransport(
            base_url, api_key, timeout=timeout, retry=retry, headers=headers, http_client=http_client
        )
        self._bind(self.transport.send)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def paginate(
        self,
        list_method: Callable[..., dict[str, Any]],
        *args: Any,
        page_size: int = DEFAULT_PAGE_SIZE,
        **filters: Any,
    ) -> Iterator[dict[str, Any]]:
        """Every result of a paginated list method, fetching `page_size` rows per request."""
        offset = 0
        while True:
            page = list_method(*args, limit=page_size, offset=offset, **filters)
            results = page.get("results", [])
            yield from results
            offset += len(results)
            if not results or not page.get("next"):
                return


class AsyncMemoryClient(_Resources):
    """The asyncio twin of `MemoryClient`: every resource method returns an awaitable."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.transport = AsyncTransport(
            base_url, api_key, timeout=timeout, retry=retry, headers=headers, http_client=http_client
        )
        self._bind(self.transport.send)

    async def aclose(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def paginate(
        self, list_method: Callable[..., Any], *args: Any, page_size: int = DEFAULT_PAGE_SIZE, **filters: Any
    ) -> AsyncIterator[dict[str, Any]]:
        offset = 0
        while True:
            page = await list_method(*args, limit=page_size, offset=offset, **filters)
            results = page.get("results", [])
            for item in results:
                yield item
            offset += len(results)
            if not results or not page.get("next"):
                return


class LazyClients:
    """A sync and an async client made on first use, for adapters (the LangGraph saver and
    store) that LangGraph may drive from either side. The adapter sets `_base_url`,
    `_api_key`, `_timeout`, `_retry`, and `_client` / `_async_client` to None."""

    _client: MemoryClient | None
    _async_client: AsyncMemoryClient | None

    @property
    def client(self) -> MemoryClient:
        if self._client is None:
            self._client = MemoryClient(
                self._base_url, self._api_key, timeout=self._timeout, retry=self._retry
            )
        return self._client

    @property
    def async_client(self) -> AsyncMemoryClient:
        if self._async_client is None:
            self._async_client = AsyncMemoryClient(
                self._base_url, self._api_key, timeout=self._timeout, retry=self._retry
            )
        return self._async_client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        if self._async_client is not None:
            await self._async_client.aclose()
