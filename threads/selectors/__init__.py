"""Re-exports every public read of conversation memory, so `threads.selectors.X` keeps working."""

from threads.selectors.branch import WALK_MAX_STEPS, branch_walk
from threads.selectors.branch import _window_sql as _window_sql  # bench/threads_window.py times it
from threads.selectors.chat import SYSTEM_AS_MODES, chat_system_message, system_as_clean
from threads.selectors.context import THREAD_OTHER_AGENT, MemoryContext, memory_context_resolve
from threads.selectors.plans import (
    iteration_log_list,
    iteration_log_recent,
    run_snapshot_get,
    thread_plan_get,
    thread_plan_versions,
)
from threads.selectors.recall import (
    MESSAGE_NEIGHBOURS_SQL,
    MESSAGE_WEIGHTS,
    RECALLED_CLOSE,
    RECALLED_HEADER,
    RECALLED_OPEN,
    MessageHit,
    MessageSearchResult,
    message_search_related,
)
from threads.selectors.threads import (
    MESSAGE_NOT_FOUND,
    THREAD_NOT_FOUND,
    message_get,
    message_list,
    thread_get,
    thread_list,
    thread_scoped_queryset,
)
from threads.selectors.transfers import transfer_handed_away, transfer_list
from threads.selectors.window import (
    CONVERSATION_MEMORY_OFF,
    FILES_MODES,
    LEAF_UNKNOWN,
    MEMORY_MODE_INVALID,
    SUMMARY_PREFIX,
    TOOL_FORMATS,
    WINDOW_FALLBACK,
    WINDOW_SLACK_ROWS,
    WINDOW_STANDARD,
    HistoryWindow,
    memory_scope,
    message_history_window,
    window_uses_fallback,
)

__all__ = [
    "CONVERSATION_MEMORY_OFF",
    "FILES_MODES",
    "LEAF_UNKNOWN",
    "MEMORY_MODE_INVALID",
    "MESSAGE_NEIGHBOURS_SQL",
    "MESSAGE_NOT_FOUND",
    "MESSAGE_WEIGHTS",
    "RECALLED_CLOSE",
    "RECALLED_HEADER",
    "RECALLED_OPEN",
    "SUMMARY_PREFIX",
    "SYSTEM_AS_MODES",
    "THREAD_NOT_FOUND",
    "THREAD_OTHER_AGENT",
    "WALK_MAX_STEPS",
    "TOOL_FORMATS",
    "WINDOW_FALLBACK",
    "WINDOW_SLACK_ROWS",
    "WINDOW_STANDARD",
    "HistoryWindow",
    "MemoryContext",
    "MessageHit",
    "MessageSearchResult",
    "branch_walk",
    "chat_system_message",
    "iteration_log_list",
    "iteration_log_recent",
    "memory_context_resolve",
    "memory_scope",
    "message_get",
    "message_history_window",
    "message_list",
    "message_search_related",
    "run_snapshot_get",
    "system_as_clean",
    "thread_get",
    "thread_list",
    "thread_plan_get",
    "thread_plan_versions",
    "thread_scoped_queryset",
    "transfer_handed_away",
    "transfer_list",
    "window_uses_fallback",
]
