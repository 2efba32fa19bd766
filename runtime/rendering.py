"""Render context blocks (`<user-profile>`, `<session-memory>`, `<procedures>`) within a token cap.

Every stored value is escaped with core.lib.escaping.escape_text first.
"""

from collections.abc import Iterable

from core.lib.escaping import escape_text
from core.lib.tokens import count_tokens

__all__ = ["escape_text", "fit_block", "render_block"]


def render_block(tag: str, header: str, lines: list[str]) -> str:
    body = "\n".join(([header] if header else []) + lines)
    return f"<{tag}>\n{body}\n</{tag}>"


def fit_block(tag: str, header: str, lines: Iterable[str], cap: int) -> tuple[str, int, int]:
    """The block holding the longest prefix of `lines` whose whole rendering fits `cap` tokens.

    Returns (text, tokens, lines kept). An empty block (no line fits, or no lines) renders
    as "" with 0 tokens: a block with only its tags tells the model nothing. `lines` is
    consumed lazily and only up to the first line that cannot fit: a heavy person has
    hundreds of candidate facts, and formatting and counting every one of them cost ~3 ms
    per context for a block that keeps a few dozen.
    """
    if cap <= 0:
        return "", 0, 0
    # Per-line counts make a cheap first estimate; the rendered block is then counted whole
    # (BPE merges across line breaks) and trimmed until the exact count fits.
    overhead = count_tokens(render_block(tag, header, []))
    kept_lines: list[str] = []
    running = overhead
    for line in lines:
        cost = count_tokens(line) + 1
        if running + cost > cap:
            break
        running += cost
        kept_lines.append(line)
    kept = len(kept_lines)
    while kept > 0:
        text = render_block(tag, header, kept_lines[:kept])
        tokens = count_tokens(text)
        if tokens <= cap:
            return text, tokens, kept
        kept -= 1
    return "", 0, 0
