"""Python client for the memory server.

``MemoryClient`` / ``AsyncMemoryClient`` cover every endpoint; ``memory_client.langgraph``
holds ``MemoryServerSaver``, a LangGraph checkpoint saver on the server's checkpoint API, and
``memory_client.store`` holds ``MemoryServerStore``, a LangGraph long-term store (``BaseStore``)
on the server's store API; both need the ``langgraph`` extra.
"""

from memory_client._core import RetryPolicy
from memory_client.client import AsyncMemoryClient, MemoryClient
from memory_client.errors import (
    AuthenticationError,
    ConflictError,
    MemoryAPIError,
    MemoryClientError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    TransportError,
    ValidationError,
)

__all__ = [
    "AsyncMemoryClient",
    "AuthenticationError",
    "ConflictError",
    "MemoryAPIError",
    "MemoryClient",
    "MemoryClientError",
    "MemoryServerStore",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "TransportError",
    "ValidationError",
]


def __getattr__(name: str):
    # Imported on first use: the store needs langgraph, which the plain client does not.
    if name == "MemoryServerStore":
        from memory_client.store import MemoryServerStore

        return MemoryServerStore
    raise AttributeError(f"module 'memory_client' has no attribute {name!r}")
