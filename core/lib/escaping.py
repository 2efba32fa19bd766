"""Stored text placed inside prompt blocks (`<user-profile>`, `<recalled-messages>`, ...).

Stored text is untrusted: a fact value or a message written by anyone with a key could try
to close a block early (`</user-profile>`), forge a new one (`<system>`), or start a line
that looks like another item. `escape_text` neutralises all three: `&`, `<` and `>` become
entities and line breaks become spaces, so every item stays one line inside its block.
"""

import json
from html import escape


def escape_text(value, *, limit: int | None = None) -> str:
    text = value if isinstance(value, str) else _compact(value)
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return escape(text, quote=False)


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
