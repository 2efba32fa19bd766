"""Re-exports every public write of episodic memory, so `episodic.services.X` keeps working."""

from episodic.services.candidates import (
    REJECT_DUPLICATE_HASH,
    REJECT_DUPLICATE_SIMILAR,
    REJECT_EMPTY,
    REJECT_EVIDENCE_NOT_FOUND,
    REJECT_EVIDENCE_NOT_USER,
    REJECT_KNOWN,
    REJECT_LIMIT,
    REJECT_NO_EVIDENCE,
    REJECT_SOURCE,
    USER_SOURCES,
)
from episodic.services.embeddings import (
    entries_reembed,
    entry_embed_batch,
    entry_embed_sweep,
    entry_embedding_text,
)
from episodic.services.entries import (
    CONTENT_REQUIRED,
    SOURCE_UNKNOWN,
    STATUS_UNKNOWN,
    entries_delete,
    entry_batch_delete,
    entry_delete,
    entry_update,
)
from episodic.services.extraction import (
    EPISODIC_DISABLED,
    EXTRACTION_PROMPT,
    MEMORY_USER_OTHER_WORKSPACE,
    TRANSCRIPT_REQUIRED,
    TRANSCRIPT_TOO_LONG,
    ExtractionResult,
    entry_extract,
)
from episodic.services.normalize import entry_content_hash, entry_normalize

__all__ = [
    "CONTENT_REQUIRED",
    "EPISODIC_DISABLED",
    "EXTRACTION_PROMPT",
    "MEMORY_USER_OTHER_WORKSPACE",
    "REJECT_DUPLICATE_HASH",
    "REJECT_DUPLICATE_SIMILAR",
    "REJECT_EMPTY",
    "REJECT_EVIDENCE_NOT_FOUND",
    "REJECT_EVIDENCE_NOT_USER",
    "REJECT_KNOWN",
    "REJECT_LIMIT",
    "REJECT_NO_EVIDENCE",
    "REJECT_SOURCE",
    "SOURCE_UNKNOWN",
    "STATUS_UNKNOWN",
    "TRANSCRIPT_REQUIRED",
    "TRANSCRIPT_TOO_LONG",
    "USER_SOURCES",
    "ExtractionResult",
    "entries_delete",
    "entries_reembed",
    "entry_batch_delete",
    "entry_content_hash",
    "entry_delete",
    "entry_embed_batch",
    "entry_embed_sweep",
    "entry_embedding_text",
    "entry_extract",
    "entry_normalize",
    "entry_update",
]
