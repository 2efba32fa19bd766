"""A checkpoint's serialized state shown to a person: decoded JSON where it can be, else bytes.

Checkpoints store the client's serializer name (`type`) and its bytes. A "json" payload is
parsed; a "msgpack" one is unpacked with ormsgpack or msgpack when one is installed (LangGraph
brings ormsgpack). The result is shown only if it is plain JSON: msgpack extension types
(LangGraph's encoded objects), binary strings or non-string map keys fall back to a hex
preview, and nothing is ever turned back into client objects.
"""

import importlib
import json
from dataclasses import dataclass

HEX_PREVIEW_BYTES = 256
# Decoding builds the whole value in memory before it is cut to the page's cap; a stored state
# above this size is shown as bytes only.
MAX_DECODE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Payload:
    size: int  # bytes stored
    text: str  # pretty JSON, or a hex dump of the first bytes; never more than asked for
    total_chars: int  # the whole text's length (JSON), or of the whole hex dump
    is_json: bool
    note: str = ""  # why the payload is shown as bytes
    hex_bytes: int = 0  # bytes in the hex preview

    @property
    def truncated(self) -> bool:
        return len(self.text) < self.total_chars


def _unpacker():
    for name in ("ormsgpack", "msgpack"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if name == "msgpack":
            return lambda data: module.unpackb(data, raw=False, strict_map_key=True)
        return module.unpackb
    return None


def _decode(type_: str, data: bytes, max_decode_bytes: int):
    """(value, note): the decoded value, or None and why not."""
    kind = (type_ or "").lower()
    if len(data) > max_decode_bytes:
        return None, f"Larger than {max_decode_bytes:,} bytes: not decoded."
    if kind == "json":
        try:
            return json.loads(bytes(data).decode("utf-8")), ""
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None, "Not valid JSON despite its type."
    if kind == "msgpack":
        unpack = _unpacker()
        if unpack is None:
            return None, "No msgpack decoder is installed."
        try:
            return unpack(bytes(data)), ""
        except Exception:  # each decoder raises its own error types for bad bytes
            return None, "Not plain msgpack (extension types or invalid bytes)."
    return None, f"Serializer “{type_}” is not decoded here."


def _hex(data: bytes, count: int) -> str:
    head = bytes(data[:count])
    return " ".join(f"{byte:02x}" for byte in head)


def payload_render(*, type_: str, data, max_chars: int, max_decode_bytes: int = MAX_DECODE_BYTES) -> Payload:
    """The payload as at most `max_chars` characters of pretty JSON, or a hex preview."""
    data = bytes(data or b"")
    value, note = _decode(type_, data, max_decode_bytes)
    if not note:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            note = "Decoded, but not plain JSON (binary strings or other types)."
        else:
            return Payload(size=len(data), text=text[:max_chars], total_chars=len(text), is_json=True)
    count = min(HEX_PREVIEW_BYTES, max(max_chars // 3, 1), len(data))
    text = _hex(data, count)
    return Payload(
        size=len(data), text=text, total_chars=len(text), is_json=False, note=note, hex_bytes=count
    )
