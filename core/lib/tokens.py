"""Token counting, offline by default and pluggable.

The default counter uses `bpe-openai`, which bundles OpenAI's cl100k and o200k encodings
and produces tiktoken's ids without downloading anything at run time (tiktoken itself
fetches its encodings on first use, which this deployment cannot do).

Another counter (a provider's own tokenizer, a cheaper heuristic) is configured with the
`TOKEN_COUNTER` setting: a dotted path to a class with `count(text, *, model=None) -> int`.
"""

import json
from functools import lru_cache

from django.conf import settings
from django.utils.module_loading import import_string

# OpenAI's chat format spends about this many tokens per message on role and separators.
MESSAGE_OVERHEAD_TOKENS = 4
# An image costs a fixed estimate by detail level: OpenAI's 85 tokens at low detail, and at
# high (or auto) detail its tile rule for a 1024x1024 image, 85 + 4 tiles x 170 = 765. The
# server never fetches or decodes an image, so its real size is unknown.
IMAGE_TOKENS = {"low": 85, "high": 765, "auto": 765}


class BpeTokenCounter:
    """Counts with a bundled OpenAI encoding; the model picks o200k or cl100k when known."""

    def __init__(self, encoding: str | None = None):
        self.default_encoding = encoding or getattr(settings, "TOKEN_ENCODING", "cl100k_base")

    @staticmethod
    @lru_cache(maxsize=8)
    def _encoding(name: str):
        import bpe_openai

        return bpe_openai.get_encoding(name)

    @staticmethod
    @lru_cache(maxsize=256)
    def _encoding_name_for_model(model: str) -> str | None:
        import bpe_openai

        try:
            return bpe_openai.encoding_name_for_model(model)
        except Exception:
            return None

    def encoding_for(self, model: str | None):
        name = self._encoding_name_for_model(model) if model else None
        return self._encoding(name or self.default_encoding)

    def count(self, text: str, *, model: str | None = None) -> int:
        if not text:
            return 0
        name = (self._encoding_name_for_model(model) if model else None) or self.default_encoding
        if len(text) <= MEMO_MAX_CHARS:
            return _bpe_count_memo(name, text)
        if len(text) <= BLOCK_MEMO_MAX_CHARS:
            return _bpe_count_block_memo(name, text)
        return _bpe_count(name, text)


def _bpe_count(encoding: str, text: str) -> int:
    # disallowed_special=() counts "<|endoftext|>" typed by a user as text instead of raising.
    return len(BpeTokenCounter._encoding(encoding).encode(text, disallowed_special=()))


# The same texts are counted turn after turn (a person's facts, the recent messages, block
# headers, whole blocks that did not change): remembering their counts saves most of the
# encoding work of a context assembly. Bounded: MEMO_SIZE lines of at most MEMO_MAX_CHARS
# characters, and BLOCK_MEMO_SIZE rendered blocks of at most BLOCK_MEMO_MAX_CHARS (~10 MB).
MEMO_MAX_CHARS = 2000
MEMO_SIZE = 8192
BLOCK_MEMO_MAX_CHARS = 40_000
BLOCK_MEMO_SIZE = 256
_bpe_count_memo = lru_cache(maxsize=MEMO_SIZE)(_bpe_count)
_bpe_count_block_memo = lru_cache(maxsize=BLOCK_MEMO_SIZE)(_bpe_count)


class CharacterTokenCounter:
    """A fast estimate (4 characters per token) for deployments that prefer speed to accuracy."""

    def __init__(self, chars_per_token: float = 4.0):
        self.chars_per_token = chars_per_token

    def count(self, text: str, *, model: str | None = None) -> int:
        if not text:
            return 0
        return max(1, round(len(text) / self.chars_per_token))


@lru_cache(maxsize=4)
def _counter_for(path: str):
    return import_string(path)()


def token_counter():
    """The configured counter (`TOKEN_COUNTER`, default `BpeTokenCounter`)."""
    return _counter_for(getattr(settings, "TOKEN_COUNTER", "core.lib.tokens.BpeTokenCounter"))


def count_tokens(text: str, *, model: str | None = None) -> int:
    return token_counter().count(text, model=model)


def image_tokens(detail: str | None = None) -> int:
    """The estimate for one image at `detail` (low, high, auto; default auto)."""
    return IMAGE_TOKENS.get(detail or "auto", IMAGE_TOKENS["auto"])


def content_tokens(content, *, model: str | None = None) -> int:
    """Tokens of a message's content: a string, or a list of content parts (OpenAI's `text` and
    `image_url`, Anthropic's `text` and `image`), each image at its `IMAGE_TOKENS` estimate."""
    counter = token_counter()
    if isinstance(content, str) or content is None:
        return counter.count(content or "", model=model)
    total = 0
    for part in content:
        kind = part.get("type")
        if kind == "text":
            total += counter.count(part.get("text") or "", model=model)
        elif kind == "image_url":
            total += image_tokens((part.get("image_url") or {}).get("detail"))
        elif kind == "image":
            # Anthropic's image blocks carry no detail level.
            total += image_tokens("auto")
        else:
            total += counter.count(json.dumps(part, ensure_ascii=False), model=model)
    return total


def count_message_tokens(
    *,
    content: str | list = "",
    tool_calls: list | None = None,
    name: str = "",
    model: str | None = None,
) -> int:
    """Tokens one chat message costs: its text (or content parts: text, images), its tool
    calls' names and arguments, overhead."""
    counter = token_counter()
    total = MESSAGE_OVERHEAD_TOKENS + content_tokens(content, model=model)
    if name:
        total += counter.count(name, model=model)
    for call in tool_calls or ():
        total += counter.count(call.get("name", ""), model=model)
        arguments = call.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        total += counter.count(arguments, model=model) + MESSAGE_OVERHEAD_TOKENS
    return total
