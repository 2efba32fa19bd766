"""Checks of one message dict as clients (and other tiers' services) send it.

Pure functions: no queries. Parent existence, tool-call pairing and idempotency need the
database and live in `threads.services`.
"""

import json
import uuid
from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

ROLES = ("system", "user", "assistant", "tool")
FILE_TYPES = ("image", "audio", "video", "document", "custom")
FILE_TRANSFER_METHODS = ("local_file", "remote_url", "tool_file")
FILE_OWNERS = ("user", "assistant")
FILE_KEYS = {"type", "transfer_method", "file_id", "url", "belongs_to", "filename", "mime_type", "size"}
MESSAGE_KEYS = {
    "id",
    "role",
    "content",
    "parent",
    "metadata",
    "created_at",
    "idempotency_key",
    "tool_calls",
    "tool_call_id",
    "files",
    "node_id",
    "author_agent",
    "delegation_id",
    "name",
}

UNKNOWN_FIELD = "Unknown field."
ROLE_INVALID = "Role must be one of: system, user, assistant, tool."
CONTENT_TOO_LONG = "Content is longer than {limit} characters."
CONTENT_REQUIRED = "A message needs content, tool calls or files."
TEXT_INVALID = "Must be valid UTF-8 text without NUL characters."
MUST_BE_STRING = "Must be a string."
MUST_BE_OBJECT = "Must be an object."
MUST_BE_LIST = "Must be a list."
TOO_LONG = "Longer than {limit} characters."
UUID_INVALID = "Must be a message id (UUID)."
DATETIME_INVALID = "Must be an ISO 8601 date-time."
TOOL_CALL_ID_REQUIRED = "A tool result needs `tool_call_id`."
TOOL_CALL_ID_ONLY_FOR_TOOL = "Only tool results carry `tool_call_id`."
TOOL_CALLS_ONLY_FOR_ASSISTANT = "Only assistant messages carry `tool_calls`."
TOOL_CALL_INVALID = "Each tool call needs a string `id` and `name`, and `arguments` (string or object)."
TOOL_CALL_DUPLICATE = "Tool call ids must be unique within a message."
FILE_INVALID = (
    "Each file needs `type` (image, audio, video, document, custom), `transfer_method` "
    "(local_file, remote_url, tool_file), and `file_id`, or `url` for remote_url; "
    "only references, never bytes."
)


class MessageErrors(Exception):
    def __init__(self, fields: dict):
        super().__init__("Invalid message.")
        self.fields = fields


def _text_ok(value: str) -> bool:
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates ("\ud800") are valid JSON but not UTF-8; PostgreSQL would refuse them.
        return False
    return True


def _string(errors, key, value, *, limit: int, required=False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        errors[key] = [MUST_BE_STRING]
        return ""
    if len(value) > limit:
        errors[key] = [TOO_LONG.format(limit=limit)]
    elif not _text_ok(value):
        errors[key] = [TEXT_INVALID]
    return value


def _json_text_ok(value) -> bool:
    try:
        return _text_ok(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return False


def tool_calls_clean(errors, value) -> list[dict]:
    if value in (None, []):
        return []
    if not isinstance(value, list):
        errors["tool_calls"] = [MUST_BE_LIST]
        return []
    calls = []
    for call in value:
        if not isinstance(call, dict):
            errors["tool_calls"] = [TOOL_CALL_INVALID]
            return []
        # Accept OpenAI's shape ({"id", "type": "function", "function": {...}}) and the flat one.
        function = call.get("function") if isinstance(call.get("function"), dict) else call
        call_id, name = call.get("id"), function.get("name")
        arguments = function.get("arguments", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            errors["tool_calls"] = [TOOL_CALL_INVALID]
            return []
        if not isinstance(arguments, str):
            try:
                arguments = json.dumps(arguments, ensure_ascii=False)
            except (TypeError, ValueError):
                errors["tool_calls"] = [TOOL_CALL_INVALID]
                return []
        if len(call_id) > 100 or len(name) > 200 or not _text_ok(call_id + name + arguments):
            errors["tool_calls"] = [TOOL_CALL_INVALID]
            return []
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    if len({c["id"] for c in calls}) != len(calls):
        errors["tool_calls"] = [TOOL_CALL_DUPLICATE]
    return calls


def files_clean(errors, value, *, role: str) -> list[dict]:
    if value in (None, []):
        return []
    if not isinstance(value, list):
        errors["files"] = [MUST_BE_LIST]
        return []
    files = []
    for item in value:
        if (
            not isinstance(item, dict)
            or set(item) - FILE_KEYS
            or item.get("type") not in FILE_TYPES
            or item.get("transfer_method") not in FILE_TRANSFER_METHODS
            or item.get("belongs_to", "user") not in FILE_OWNERS
            or not _json_text_ok(item)
        ):
            errors["files"] = [FILE_INVALID]
            return []
        reference = item.get("url") if item["transfer_method"] == "remote_url" else item.get("file_id")
        if not isinstance(reference, str) or not reference or len(reference) > 2000:
            errors["files"] = [FILE_INVALID]
            return []
        clean = dict(item)
        clean.setdefault("belongs_to", "assistant" if role == "assistant" else "user")
        files.append(clean)
    return files


def created_at_clean(errors, value):
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None:
        errors["created_at"] = [DATETIME_INVALID]
        return None
    if timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def uuid_clean(errors, key, value):
    if value in (None, ""):
        return None
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (ValueError, AttributeError, TypeError):
        errors[key] = [UUID_INVALID]
        return None


def message_clean(raw) -> dict:
    """Normalize one message dict or raise MessageErrors with per-field messages."""
    if not isinstance(raw, dict):
        raise MessageErrors({"non_field_errors": [MUST_BE_OBJECT]})
    errors: dict[str, list[str]] = {}
    for key in sorted(set(raw) - MESSAGE_KEYS):
        errors[key] = [UNKNOWN_FIELD]
    role = raw.get("role")
    if role not in ROLES:
        errors["role"] = [ROLE_INVALID]
        role = "user"
    limit = settings.THREADS_MAX_CONTENT_CHARS
    content = raw.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        errors["content"] = [MUST_BE_STRING]
        content = ""
    elif len(content) > limit:
        errors["content"] = [CONTENT_TOO_LONG.format(limit=limit)]
    elif not _text_ok(content):
        errors["content"] = [TEXT_INVALID]
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        errors["metadata"] = [MUST_BE_OBJECT]
        metadata = {}
    elif not _json_text_ok(metadata):
        errors["metadata"] = [TEXT_INVALID]
    tool_calls = tool_calls_clean(errors, raw.get("tool_calls"))
    if tool_calls and role != "assistant":
        errors["tool_calls"] = [TOOL_CALLS_ONLY_FOR_ASSISTANT]
    tool_call_id = _string(errors, "tool_call_id", raw.get("tool_call_id"), limit=100)
    if role == "tool" and not tool_call_id and "tool_call_id" not in errors:
        errors["tool_call_id"] = [TOOL_CALL_ID_REQUIRED]
    if role != "tool" and tool_call_id:
        errors["tool_call_id"] = [TOOL_CALL_ID_ONLY_FOR_TOOL]
    files = files_clean(errors, raw.get("files"), role=role)
    if not content and not tool_calls and not files and "content" not in errors:
        errors["content"] = [CONTENT_REQUIRED]
    cleaned = {
        "id": uuid_clean(errors, "id", raw.get("id")),
        "role": role,
        "content": content,
        "parent": uuid_clean(errors, "parent", raw.get("parent")),
        "parent_given": raw.get("parent") not in (None, ""),
        "metadata": metadata,
        "created_at": created_at_clean(errors, raw.get("created_at")),
        "idempotency_key": _string(errors, "idempotency_key", raw.get("idempotency_key"), limit=200),
        "tool_calls": tool_calls,
        "tool_call_id": tool_call_id,
        "files": files,
        "node_id": _string(errors, "node_id", raw.get("node_id"), limit=100),
        "author_agent": _string(errors, "author_agent", raw.get("author_agent"), limit=100),
        "delegation_id": _string(errors, "delegation_id", raw.get("delegation_id"), limit=100),
        "name": _string(errors, "name", raw.get("name"), limit=100),
    }
    if errors:
        raise MessageErrors(errors)
    return cleaned
