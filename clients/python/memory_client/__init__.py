"""Python client for the memory server.

``MemoryClient`` / ``AsyncMemoryClient`` cover every endpoint; ``memory_client.langgraph``
holds ``MemoryServerSaver``, a LangGraph checkpoint saver on the server's checkpoint API.
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
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "TransportError",
    "ValidationError",
]
