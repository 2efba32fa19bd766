"""Stored text placed in front of a model: context blocks, `<memory>`, summaries, tool results.

Stored text is untrusted: a fact value or a message written by anyone with a key could try
to close a block early (`</user-profile>`), forge a new one (`<system>`), or start a line
that looks like another item. `escape_text` neutralises all three: `&`, `<` and `>` become
entities and line breaks become spaces, so every item stays one line inside its block.

It could also carry text a person reviewing it cannot see but a model reads: Unicode tag
characters (U+E0000-E007F, which tokenizers turn back into ASCII instructions), zero-width
characters, bidi controls that reorder what is displayed, variation-selector runs that
encode bytes after one emoji, and other invisible format characters. `strip_invisible`
removes them; `escape_text` applies it first. Every renderer of memory text for a model
goes through one of the two: `escape_text` inside tagged blocks, `strip_invisible` (or
`strip_invisible_json`) where the text must stay raw (chat messages, JSON tool results,
quotes an LLM must copy exactly).

Kept on purpose, because removing them would change what a person sees:

- U+200D ZERO WIDTH JOINER directly between two emoji (👨‍👩‍👧, 🏳️‍🌈, 🧑🏽‍💻), and U+200C /
  U+200D directly between two letters of a script that shapes with them (Arabic and
  Persian, Syriac, the Indic scripts, Myanmar, Khmer, Mongolian). A joiner there carries at
  most one bit per visible pair and cannot spell a hidden instruction; anywhere else, and
  in runs, it is removed.
- One variation selector U+FE00-FE0F right after a visible character (emoji vs text
  presentation, ❤️); a selector after another selector or after nothing visible is
  removed, and so is every U+E0100-E01EF selector.
- The visible format characters (U+0600-0605, U+06DD, U+070F, U+0890-0891, U+08E2,
  U+110BD, U+110CD: signs that are drawn) and whitespace, which escape_text collapses.

Removed too: tag sequences of the subdivision flags (England, Scotland, Wales), which
then show as a plain black flag: the tag block is the smuggling channel, whatever it is
attached to.
"""

import json
import re
import unicodedata
from html import escape

# Invisible on screen but read by a model; each range with the reason it is here.
INVISIBLE_RANGES = (
    (0xD800, 0xDFFF),  # lone surrogates: no character at all, and not encodable as UTF-8
    (0x0000, 0x0008),  # C0 controls other than whitespace
    (0x000E, 0x001B),
    (0x007F, 0x0084),  # DEL and C1 controls other than NEL
    (0x0086, 0x009F),
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark (bidi)
    (0x115F, 0x1160),  # Hangul choseong / jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels (drawn as nothing)
    (0x180B, 0x180F),  # Mongolian free variation selectors and vowel separator
    (0x200B, 0x200F),  # zero width space, non-joiner, joiner; left-to-right / right-to-left marks
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated format controls
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors (one after a visible character is kept, see below)
    (0xFEFF, 0xFEFF),  # zero width no-break space / byte order mark
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF9, 0xFFFB),  # interlinear annotation controls
    (0x13430, 0x1343F),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE007F),  # tags: invisible ASCII that tokenizers read as text
    (0xE0100, 0xE01EF),  # variation selectors supplement
)

# Format characters (category Cf) that are drawn, so they stay.
VISIBLE_FORMAT_CHARACTERS = frozenset(
    [*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x110BD, 0x110CD]
)

ZWNJ, ZWJ = "\u200c", "\u200d"

# Blocks holding the Extended_Pictographic characters that take part in emoji ZWJ sequences
# (the `regex` module's \p{Extended_Pictographic} is not a dependency; these blocks cover
# every sequence in emoji-zwj-sequences.txt, and a symbol of them that is not an emoji only
# keeps a joiner that is drawn as nothing).
_EMOJI_RANGES = (
    (0x00A9, 0x00A9),
    (0x00AE, 0x00AE),
    (0x203C, 0x203C),
    (0x2049, 0x2049),
    (0x2122, 0x2122),
    (0x2139, 0x2139),
    (0x2190, 0x21FF),
    (0x2300, 0x23FF),
    (0x24C2, 0x24C2),
    (0x25A0, 0x27BF),
    (0x2900, 0x297F),
    (0x2B00, 0x2BFF),
    (0x3030, 0x3030),
    (0x303D, 0x303D),
    (0x3297, 0x3297),
    (0x3299, 0x3299),
    (0x1F000, 0x1FAFF),
)

# Scripts whose shaping uses ZWNJ / ZWJ between letters (Persian "می‌خواهم", Devanagari
# half forms, ...): Arabic, Syriac, Thaana, NKo and their extensions; the Indic blocks
# from Devanagari to Sinhala; Tibetan; Myanmar; Khmer and Mongolian; Devanagari Extended;
# Arabic presentation forms.
_JOINING_RANGES = (
    (0x0600, 0x08FF),
    (0x0900, 0x0DFF),
    (0x0F00, 0x0FFF),
    (0x1000, 0x109F),
    (0x1780, 0x18AF),
    (0xA8E0, 0xA8FF),
    (0xFB50, 0xFDFF),
    (0xFE70, 0xFEFC),
)


def _char_class(ranges) -> str:
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges
    )


_INVISIBLE = re.compile(f"[{_char_class(INVISIBLE_RANGES)}]")
_ASCII_CONTROLS = bytes(code for a, b in INVISIBLE_RANGES if a < 0x80 for code in range(a, min(b, 0x7F) + 1))
_EMOJI = re.compile(f"[{_char_class(_EMOJI_RANGES)}]")
_VARIATION_SELECTOR = re.compile("[\ufe00-\ufe0f]")


def _in_joining_script(char: str) -> bool:
    code = ord(char)
    return any(a <= code <= b for a, b in _JOINING_RANGES) and unicodedata.category(char)[0] in "LM"


def _visible_base(char: str) -> bool:
    return not _INVISIBLE.match(char) and not char.isspace()


def _keep(match: re.Match) -> str:
    """The matched invisible character when its place makes it visible in effect, else ""."""
    char, text, start = match.group(), match.string, match.start()
    before = text[start - 1] if start > 0 else ""
    after = text[start + 1] if start + 1 < len(text) else ""
    if char in (ZWJ, ZWNJ) and before and after:
        if _in_joining_script(before) and _in_joining_script(after):
            return char
        # An emoji before the joiner may carry its presentation selector or skin tone first.
        base = text[start - 2] if before == "\ufe0f" and start > 1 else before
        if char == ZWJ and _EMOJI.match(after) and _EMOJI.match(base):
            return char
    elif _VARIATION_SELECTOR.match(char) and before and _visible_base(before):
        return char
    return ""


def strip_invisible(text: str) -> str:
    """`text` without invisible, bidi-control and format characters (module docstring).

    Line breaks and other whitespace are left alone: this is the raw form for chat messages
    and JSON. Text with none of them is returned as is, without a copy.
    """
    if not text:
        return text
    if text.isascii():
        # ASCII text (most of what is stored) can only hold C0 controls; dropping them from
        # the bytes runs in C at ~1 ns a character, where the regex takes ~12 ns (a whole
        # context answer measured 320 us through the regex alone).
        raw = text.encode("ascii")
        kept = raw.translate(None, _ASCII_CONTROLS)
        return text if len(kept) == len(raw) else kept.decode("ascii")
    if _INVISIBLE.search(text) is None:
        return text
    return _INVISIBLE.sub(_keep, text)


def strip_invisible_json(value):
    """`value` (decoded JSON: dicts, lists, strings, numbers) with every string, keys included,
    passed through `strip_invisible`."""
    if isinstance(value, str):
        return strip_invisible(value)
    if isinstance(value, dict):
        return {
            strip_invisible(k) if isinstance(k, str) else k: strip_invisible_json(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [strip_invisible_json(v) for v in value]
    return value


def escape_text(value, *, limit: int | None = None) -> str:
    """One line of stored text for a tagged block: invisible characters removed, whitespace
    collapsed, cut to `limit` characters, markup escaped."""
    text = value if isinstance(value, str) else _compact(value)
    text = " ".join(strip_invisible(text).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return escape(text, quote=False)


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
