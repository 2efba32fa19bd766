"""Render context blocks (`<user-profile>`, `<session-memory>`, `<procedures>`) within a token cap.

Stored text is untrusted: a fact value or a plan written by anyone with a key could try to
close a block early (`</user-profile>`), forge a new one (`<system>`), or start a line
that looks like another item. `escape_text` neutralises all three: `&`, `<` and `>` become
entities and line breaks become spaces, so every item stays one line inside its block.
"""

from html import escape

from core.lib.tokens import count_tokens


def escape_text(value, *, limit: int | None = None) -> str:
    text = value if isinstance(value, str) else _compact(value)
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return escape(text, quote=False)


def _compact(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def render_block(tag: str, header: str, lines: list[str]) -> str:
    body = "\n".join(([header] if header else []) + lines)
    return f"<{tag}>\n{body}\n</{tag}>"


def fit_block(tag: str, header: str, lines: list[str], cap: int) -> tuple[str, int, int]:
    """The block holding the longest prefix of `lines` whose whole rendering fits `cap` tokens.

    Returns (text, tokens, lines kept). An empty block (no line fits, or no lines) renders
    as "" with 0 tokens: a block with only its tags tells the model nothing.
    """
    if not lines or cap <= 0:
        return "", 0, 0
    # Per-line counts make a cheap first estimate; the rendered block is then counted whole
    # (BPE merges across line breaks) and trimmed until the exact count fits.
    overhead = count_tokens(render_block(tag, header, []))
    kept, running = 0, overhead
    for line in lines:
        cost = count_tokens(line) + 1
        if running + cost > cap:
            break
        running += cost
        kept += 1
    while kept > 0:
        text = render_block(tag, header, lines[:kept])
        tokens = count_tokens(text)
        if tokens <= cap:
            return text, tokens, kept
        kept -= 1
    return "", 0, 0
