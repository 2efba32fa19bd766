"""Checks of one message dict as clients (and other tiers' services) send it.

Pure functions: no queries. Parent existence, tool-call pairing and idempotency need the
database and live in `threads.services`.
"""

import binascii
import json
import re
import unicodedata
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

ROLES = ("system", "user", "assistant", "tool")
FILE_TYPES = ("image", "audio", "video", "document", "custom")
# Dify's three, and `inline` for an image's base64 `data` or a document's extracted `text`.
FILE_TRANSFER_METHODS = ("local_file", "remote_url", "tool_file", "inline")
FILE_OWNERS = ("user", "assistant")
FILE_KEYS = {
    "type",
    "transfer_method",
    "file_id",
    "url",
    "belongs_to",
    "filename",
    "mime_type",
    "size",
    "data",
    "detail",
    "name",
    "text",
}
IMAGE_DETAILS = ("low", "high", "auto")
IMAGE_MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
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
FILES_TOO_MANY = "At most {limit} files per message."
FILE_NOT_OBJECT = "Each file is an object."
FILE_TYPE_INVALID = "Must be one of: image, audio, video, document, custom."
FILE_OWNER_INVALID = "Must be user or assistant."
FILE_TRANSFER_METHOD_INVALID = "Must be one of: local_file, remote_url, tool_file, inline."
FILE_REFERENCE_REQUIRED = (
    "A file needs `url` (http or https), `data` (base64, images), `text` (documents) or `file_id`."
)
FILE_REMOTE_NEEDS_URL = "A remote_url file needs `url`."
FILE_URL_INVALID = (
    "Must be an http(s) URL of at most 2000 characters, or a base64 data: URL of an image; "
    "it is passed on to the model, never fetched."
)
FILE_URL_AND_DATA = "Send `url` or `data`, not both."
FILE_DATA_INVALID = "Must be base64 (standard alphabet, padded)."
FILE_DATA_TOO_LARGE = "Larger than {limit} bytes once decoded."
FILE_DATA_ONLY_FOR_IMAGES = "Only images carry `data`; send a document's extracted `text`."
FILE_IMAGE_MIME_INVALID = "An inline image needs `mime_type` image/png, image/jpeg, image/gif or image/webp."
FILE_MIME_INVALID = "Must be a media type such as image/png."
FILE_MIME_MISMATCH = "Differs from the media type of the data: URL."
FILE_DETAIL_INVALID = "Must be low, high or auto, on images only."
FILE_TEXT_ONLY_FOR_DOCUMENTS = "Only documents carry `text`."
FILE_TEXT_INVALID = "Must be non-empty UTF-8 text without NUL characters."
FILE_TEXT_TOO_LONG = "Longer than {limit} characters."
FILE_NAME_INVALID = "Must be one line of text of at most 255 characters."
FILE_ID_INVALID = "Must be a string of at most 2000 characters."
FILE_URL_MAX_CHARS = 2000
FILE_NAME_MAX_CHARS = 255
MAX_FILES = 32
_DATA_URL = re.compile(r"^data:(image/[a-z0-9.+-]+);base64,(.*)$", re.IGNORECASE | re.DOTALL)
_MIME = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,99}$", re.IGNORECASE)


class MessageErrors(Exception):
    def __init__(self, fields: dict, *, too_large: bool = False):
        super().__init__("Invalid message.")
        self.fields = fields
        # A file over THREADS_FILE_DATA_MAX_BYTES or THREADS_FILE_TEXT_MAX_CHARS: 413.
        self.too_large = too_large


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


def _file_url(errors, key, value) -> tuple[str, str, str]:
    """(url, mime type, base64 data) of a file's `url`: an http(s) URL is kept as given, a
    base64 `data:` URL is split into its type and data. Nothing is fetched."""
    if not isinstance(value, str) or not value:
        errors[key] = [FILE_URL_INVALID]
        return "", "", ""
    match = _DATA_URL.match(value)
    if match:
        return "", match.group(1).lower(), match.group(2)
    if len(value) > FILE_URL_MAX_CHARS or not _text_ok(value) or any(c.isspace() for c in value):
        errors[key] = [FILE_URL_INVALID]
        return "", "", ""
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        errors[key] = [FILE_URL_INVALID]
        return "", "", ""
    return value, "", ""


def _file_data(errors, key, value) -> bool:
    """Whether `value` is base64 within THREADS_FILE_DATA_MAX_BYTES; True when too large."""
    limit = settings.THREADS_FILE_DATA_MAX_BYTES
    if not isinstance(value, str) or not value:
        errors[key] = [FILE_DATA_INVALID]
        return False
    # Measured before decoding: a huge string is refused without work.
    if len(value) // 4 * 3 - value[-2:].count("=") > limit:
        errors[key] = [FILE_DATA_TOO_LARGE.format(limit=limit)]
        return True
    if not value.isascii():
        errors[key] = [FILE_DATA_INVALID]
        return False
    try:
        binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        errors[key] = [FILE_DATA_INVALID]
    return False


def _file_clean(errors, prefix: str, item, *, role: str) -> tuple[dict | None, bool]:
    """One file reference, normalized (docs/threads.md, "Files"); (None, too_large) when invalid."""
    if not isinstance(item, dict):
        errors[prefix] = [FILE_NOT_OBJECT]
        return None, False
    before = len(errors)
    too_large = False
    for key in sorted(set(item) - FILE_KEYS):
        errors[f"{prefix}.{key}"] = [UNKNOWN_FIELD]
    kind = item.get("type")
    if kind not in FILE_TYPES:
        errors[f"{prefix}.type"] = [FILE_TYPE_INVALID]
    if item.get("belongs_to", "user") not in FILE_OWNERS:
        errors[f"{prefix}.belongs_to"] = [FILE_OWNER_INVALID]
    clean = dict(item)
    url, data_mime, data = "", "", ""
    data_key = f"{prefix}.data"
    if "url" in item:
        url, data_mime, data = _file_url(errors, f"{prefix}.url", item["url"])
        if data:
            # A data: URL is stored as `data` and `mime_type`, the one inline shape.
            if "data" in item:
                errors[f"{prefix}.data"] = [FILE_URL_AND_DATA]
            clean.pop("url")
            clean["data"] = data
            data_key = f"{prefix}.url"
            if item.get("mime_type", data_mime) != data_mime:
                errors[f"{prefix}.mime_type"] = [FILE_MIME_MISMATCH]
            clean["mime_type"] = data_mime
    if "data" in item:
        if url:
            errors[f"{prefix}.data"] = [FILE_URL_AND_DATA]
        data = item["data"]
    if data:
        too_large = _file_data(errors, data_key, data) or too_large
        if kind != "image":
            errors[data_key] = [FILE_DATA_ONLY_FOR_IMAGES]
        elif clean.get("mime_type") not in IMAGE_MIME_TYPES:
            errors[f"{prefix}.mime_type"] = [FILE_IMAGE_MIME_INVALID]
    elif "data" in item:
        errors[f"{prefix}.data"] = [FILE_DATA_INVALID]
    mime = item.get("mime_type")
    if mime is not None and (not isinstance(mime, str) or not _MIME.match(mime)):
        errors[f"{prefix}.mime_type"] = [FILE_MIME_INVALID]
    if "detail" in item and (kind != "image" or item["detail"] not in IMAGE_DETAILS):
        errors[f"{prefix}.detail"] = [FILE_DETAIL_INVALID]
    if "text" in item:
        text = item["text"]
        limit = settings.THREADS_FILE_TEXT_MAX_CHARS
        if kind != "document":
            errors[f"{prefix}.text"] = [FILE_TEXT_ONLY_FOR_DOCUMENTS]
        elif not isinstance(text, str) or not text or not _text_ok(text):
            errors[f"{prefix}.text"] = [FILE_TEXT_INVALID]
        elif len(text) > limit:
            errors[f"{prefix}.text"] = [FILE_TEXT_TOO_LONG.format(limit=limit)]
            too_large = True
    for key in ("name", "filename"):
        if key in item:
            value = item[key]
            if (
                not isinstance(value, str)
                or not value
                or len(value) > FILE_NAME_MAX_CHARS
                or not _text_ok(value)
                or any(unicodedata.category(c) == "Cc" for c in value)
            ):
                errors[f"{prefix}.{key}"] = [FILE_NAME_INVALID]
    if "file_id" in item:
        file_id = item["file_id"]
        if not isinstance(file_id, str) or not file_id or len(file_id) > 2000 or not _text_ok(file_id):
            errors[f"{prefix}.file_id"] = [FILE_ID_INVALID]
    # Dify's transfer methods; without one it follows from what the file carries.
    method = item.get("transfer_method")
    if method is None:
        if url:
            method = "remote_url"
        elif data or "text" in item:
            method = "inline"
        elif "file_id" in item:
            method = "local_file"
        else:
            errors.setdefault(prefix, [FILE_REFERENCE_REQUIRED])
            return None, too_large
        clean["transfer_method"] = method
    elif method == "remote_url" and data and "data" not in item:
        # A data: URL sent as Dify's remote_url is inline once split.
        method = clean["transfer_method"] = "inline"
    if method not in FILE_TRANSFER_METHODS:
        errors[f"{prefix}.transfer_method"] = [FILE_TRANSFER_METHOD_INVALID]
    elif method == "remote_url" and not url:
        errors.setdefault(f"{prefix}.url", [FILE_REMOTE_NEEDS_URL])
    elif method in ("local_file", "tool_file") and "file_id" not in item:
        errors.setdefault(f"{prefix}.file_id", [FILE_REFERENCE_REQUIRED])
    elif method == "inline" and not data and "text" not in item:
        errors.setdefault(prefix, [FILE_REFERENCE_REQUIRED])
    if not _json_text_ok(item):
        errors.setdefault(prefix, [TEXT_INVALID])
    if len(errors) > before:
        return None, too_large
    clean.setdefault("belongs_to", "assistant" if role == "assistant" else "user")
    return clean, False


def files_clean(errors, value, *, role: str) -> tuple[list[dict], bool]:
    """The message's file references, each checked (errors name `files[i].key`), and whether
    one was refused for its size (the append then answers 413)."""
    if value in (None, []):
        return [], False
    if not isinstance(value, list):
        errors["files"] = [MUST_BE_LIST]
        return [], False
    if len(value) > MAX_FILES:
        errors["files"] = [FILES_TOO_MANY.format(limit=MAX_FILES)]
        return [], False
    files, too_large = [], False
    for index, item in enumerate(value):
        clean, large = _file_clean(errors, f"files[{index}]", item, role=role)
        too_large = too_large or large
        if clean is not None:
            files.append(clean)
    return files, too_large


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
    files, files_too_large = files_clean(errors, raw.get("files"), role=role)
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
        raise MessageErrors(errors, too_large=files_too_large)
    return cleaned
