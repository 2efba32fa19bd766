"""Checks shared by extraction and the facts hand-off: rejection reasons, user sources, evidence matching."""

import re

from core.lib.escaping import strip_invisible
from episodic.models import EpisodicEntry

# Per-candidate rejection reasons (the `reason` of each rejected candidate).
REJECT_EMPTY = "empty_content"
REJECT_SOURCE = "unknown_source"
REJECT_NO_EVIDENCE = "evidence_missing"
REJECT_EVIDENCE_NOT_FOUND = "evidence_not_in_transcript"
REJECT_EVIDENCE_NOT_USER = "evidence_not_from_user"
REJECT_LIMIT = "over_max_entries_per_turn"
REJECT_DUPLICATE_HASH = "duplicate_exact"
REJECT_DUPLICATE_SIMILAR = "duplicate_similar"
REJECT_KNOWN = "already_in_context"

# The sources an extracted candidate may claim: each is proven by a quote of the transcript.
EXTRACTED_SOURCES = {
    EpisodicEntry.Source.USER_ASSERTION,
    EpisodicEntry.Source.USER_ACCEPTED_PROPOSAL,
    EpisodicEntry.Source.VERIFIED_FINDING,
}
USER_SOURCES = {
    EpisodicEntry.Source.USER_ASSERTION,
    EpisodicEntry.Source.USER_ACCEPTED_PROPOSAL,
}


def _collapse(text: str) -> str:
    # Evidence is stored without invisible characters, so it is matched without them too.
    return re.sub(r"\s+", " ", strip_invisible(text or "")).strip()


def _evidence_messages(evidence: str, transcript: list[dict]) -> list[dict]:
    needle = _collapse(evidence)
    return [m for m in transcript if needle and needle in _collapse(m.get("content", ""))]
