"""The stored form of episodic text: normalisation, the content hash and truncation."""

import hashlib
import re
import unicodedata

from core.lib.escaping import strip_invisible


def entry_normalize(text: str) -> str:
    """NFKC, invisible characters removed, whitespace collapsed, trimmed: the form that is
    stored and hashed (so a zero-width character neither hides text nor evades dedupe)."""
    return re.sub(r"\s+", " ", strip_invisible(unicodedata.normalize("NFKC", text or ""))).strip()


def entry_content_hash(text: str) -> str:
    """SHA-256 of the case-folded normal form: "Likes tea." and "likes  tea." collide."""
    return hashlib.sha256(entry_normalize(text).casefold().encode()).hexdigest()


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:") + "…"
