"""Re-exports every public write of conversation memory, so `threads.services.X` keeps working."""

from threads.services.compaction import (
    COMPACTION_LEASE,
    COMPACTION_REQUEST_TTL,
    CompactionPlan,
    context_window_for,
    thread_compact,
    thread_compact_request,
    thread_summarize,
)
from threads.services.embeddings import (
    EMBEDDABLE_ROLES,
    message_embed_batch,
    message_embed_sweep,
    message_embedding_texts,
    messages_reembed,
)
from threads.services.messages import (
    BATCH_TOO_LARGE,
    ID_TAKEN,
    IDEMPOTENCY_DUPLICATE,
    MESSAGES_INVALID,
    MESSAGES_REQUIRED,
    NODE_REQUIRED,
    PARENT_UNKNOWN,
    TOOL_RESULT_WITHOUT_CALL,
    archived_reference,
    thread_append_messages,
    thread_messages_clear,
)
from threads.services.plans import PLAN_INVALID, thread_plan_set
from threads.services.retention import (
    thread_batch_delete,
    thread_delete,
    threads_delete,
)
from threads.services.runs import RUN_ID_INVALID, iteration_log_append, run_snapshot_put
from threads.services.threads import (
    MEMORY_USER_UNKNOWN,
    METADATA_INVALID,
    memory_user_canonical,
    thread_create,
    thread_resolve,
    thread_resolve_or_create,
    thread_update,
)
from threads.services.transfers import (
    TRANSFER_MESSAGE_UNKNOWN,
    TRANSFER_NO_MESSAGES,
    TRANSFER_SAME_AGENT,
    transfer_record,
)

__all__ = [
    "BATCH_TOO_LARGE",
    "COMPACTION_LEASE",
    "COMPACTION_REQUEST_TTL",
    "EMBEDDABLE_ROLES",
    "IDEMPOTENCY_DUPLICATE",
    "ID_TAKEN",
    "MEMORY_USER_UNKNOWN",
    "MESSAGES_INVALID",
    "MESSAGES_REQUIRED",
    "METADATA_INVALID",
    "NODE_REQUIRED",
    "PARENT_UNKNOWN",
    "PLAN_INVALID",
    "RUN_ID_INVALID",
    "TOOL_RESULT_WITHOUT_CALL",
    "TRANSFER_MESSAGE_UNKNOWN",
    "TRANSFER_NO_MESSAGES",
    "TRANSFER_SAME_AGENT",
    "CompactionPlan",
    "archived_reference",
    "context_window_for",
    "iteration_log_append",
    "memory_user_canonical",
    "message_embed_batch",
    "message_embed_sweep",
    "message_embedding_texts",
    "messages_reembed",
    "run_snapshot_put",
    "thread_append_messages",
    "thread_batch_delete",
    "thread_compact",
    "thread_compact_request",
    "thread_create",
    "thread_delete",
    "thread_messages_clear",
    "thread_plan_set",
    "thread_resolve",
    "thread_resolve_or_create",
    "thread_summarize",
    "thread_update",
    "threads_delete",
    "transfer_record",
]
