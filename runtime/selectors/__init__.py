"""Reads of the runtime: context assembly (`context_build` and its blocks) and `recall`, the
reads that span several tiers."""

from runtime.selectors.build import (
    ALLOCATION_INVALID,
    BUDGET_TOO_SMALL,
    ContextResult,
    allocation_clean,
    chat_message_tokens,
    context_build,
    context_result_data,
)
from runtime.selectors.memory_recall import MEMORY_TYPES, RECALL_MEMORY_TYPE_UNKNOWN, RecallResult, recall
from runtime.selectors.sections import (
    DEFAULT_ALLOCATION,
    PROCEDURES_HEADER,
    SECTIONS,
    SESSION_MEMORY_HEADER,
    USER_PROFILE_HEADER,
    MemoryQuery,
    Section,
    context_memory,
    context_procedures,
    context_session_memory,
    context_user_profile,
    memory_query,
    message_tokens,
)

__all__ = [
    "ALLOCATION_INVALID",
    "BUDGET_TOO_SMALL",
    "DEFAULT_ALLOCATION",
    "MEMORY_TYPES",
    "PROCEDURES_HEADER",
    "RECALL_MEMORY_TYPE_UNKNOWN",
    "SECTIONS",
    "SESSION_MEMORY_HEADER",
    "USER_PROFILE_HEADER",
    "ContextResult",
    "MemoryQuery",
    "RecallResult",
    "Section",
    "allocation_clean",
    "chat_message_tokens",
    "context_build",
    "context_result_data",
    "context_memory",
    "context_procedures",
    "context_session_memory",
    "context_user_profile",
    "memory_query",
    "message_tokens",
    "recall",
]
