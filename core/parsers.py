"""The one JSON parser of the API: every request body passes its guard before a serializer sees it.

PostgreSQL cannot store NUL in text or jsonb, psycopg cannot encode a lone surrogate, and
Python's JSON decoder overflows the stack on deep nesting: each would be a 500 deep inside a
service. Refusing them here, once, keeps every endpoint's bad input a 400 with one body.
"""

import json
import math
import re

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

from core.errors import BODY_TOO_LARGE

# Deeper than any memory, checkpoint or tool payload needs; far below the ~1,000 frames at
# which the decoder, the serializers and psycopg's jsonb dumper start to recurse out of stack.
JSON_MAX_DEPTH = 64

JSON_NOT_UTF8 = "The JSON document is not valid UTF-8."
JSON_MALFORMED = "The JSON document is not valid JSON: {detail}"
JSON_TOO_DEEP = f"The JSON document is nested deeper than {JSON_MAX_DEPTH} levels."
JSON_NUL = "The JSON document contains a NUL character (\\u0000), which cannot be stored."
JSON_SURROGATE = "The JSON document contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text."
JSON_CONSTANT = "NaN and Infinity are not JSON numbers."
JSON_NUMBER_RANGE = "A number is out of range: its magnitude is past 1.8e308, which cannot be stored."


class JSONRefused(ValueError):
    """A JSON document outside the API's rules. A ValueError, so code that already catches
    json.loads' errors (form fields, filters) refuses it the same way."""

    def __init__(self, message: str, *, fields=None, parsed: bool = True):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        # False: not JSON at all (syntax, encoding); True: JSON the rules refuse.
        self.parsed = parsed


class MalformedRequest(exceptions.ParseError):
    """A body the guard refuses; `fields` names where in the document, when it is one place."""

    default_code = "malformed_request"

    def __init__(self, detail=None, *, fields=None):
        super().__init__(detail)
        self.fields = fields or {}


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


# In valid UTF-8 JSON text, a NUL or a lone surrogate can only come from an escape (the
# decoder refuses raw control characters in strings, UTF-8 cannot encode a surrogate): a
# document without one of these escapes needs only its depth checked. A false match (an
# escaped backslash before "u0000") merely costs the full check.
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _refuse_constant(name):
    raise ValueError(JSON_CONSTANT)


def _finite_float(text: str) -> float:
    # json.loads reads 1e999 as infinity, which jsonb (and JSON itself) cannot hold.
    value = float(text)
    if math.isinf(value):
        raise ValueError(JSON_NUMBER_RANGE)
    return value


def json_check(value) -> None:
    """Raise JSONRefused if a decoded document nests too deep or holds text PostgreSQL refuses.

    Iterative, so a document that reached here cannot overflow the stack while it is checked.
    A refused string is named in `fields` as `messages[1].content`, the way serializers name it.
    """
    problem = _first_problem(value, with_paths=False)
    if problem is None:
        return
    message, _ = problem
    if message == JSON_TOO_DEEP:
        raise JSONRefused(message)
    # Paths cost a tuple per node: found again only for a document being refused.
    _, path = _first_problem(value, with_paths=True)
    raise JSONRefused(message, fields={_path_name(path) or "non_field_errors": [message]})


def json_storable(value) -> bool:
    """True when PostgreSQL's jsonb can hold `value` as it is: no NaN or Infinity (which
    Python's json reads and writes by default), no NUL or lone surrogate in any text, and
    nested no deeper than the API accepts. For values that did not come through the API's
    parser (a tool call's arguments, a direct service call)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return _first_problem(value, with_paths=False) is None


def _depth_check(value) -> None:
    """The depth part of json_check alone: walks containers only (a 5 MB list of numbers: ~40 ms)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > JSON_MAX_DEPTH:
            raise JSONRefused(JSON_TOO_DEEP)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _first_problem(value, *, with_paths: bool):
    stack = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            message = _text_problem(item)
            if message:
                return message, path
        elif isinstance(item, dict | list):
            if depth > JSON_MAX_DEPTH:
                return JSON_TOO_DEEP, path
            if isinstance(item, dict):
                for key, child in item.items():
                    message = _text_problem(key)
                    if message:
                        return message, path
                    stack.append((child, depth + 1, (*path, key) if with_paths else ()))
            else:
                for index, child in enumerate(item):
                    stack.append((child, depth + 1, (*path, index) if with_paths else ()))
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return JSON_NUL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return JSON_SURROGATE
    return None


def _path_name(path) -> str:
    name = ""
    for part in path:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name


def json_loads_checked(document: str | bytes):
    """json.loads under the API's rules, for every JSON document a client sends: request
    bodies, JSON in a query parameter, JSON typed into a form. JSONRefused names what was wrong."""
    original = document
    if isinstance(document, bytes):
        try:
            document = document.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONRefused(JSON_NOT_UTF8, parsed=False) from exc
    try:
        value = json.loads(document, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise JSONRefused(JSON_TOO_DEEP) from exc
    except ValueError as exc:
        if str(exc) in (JSON_CONSTANT, JSON_NUMBER_RANGE):
            raise JSONRefused(str(exc)) from exc
        raise JSONRefused(JSON_MALFORMED.format(detail=exc), parsed=False) from exc
    # Text given as str may hold a raw surrogate; bytes decoded as UTF-8 cannot.
    if isinstance(original, str) or _RISKY_ESCAPE.search(document):
        json_check(value)
    elif document.count("[") + document.count("{") > JSON_MAX_DEPTH:
        # Fewer brackets than the limit (brackets inside strings included) cannot nest past it.
        _depth_check(value)
    return value


class GuardedJSONParser(JSONParser):
    """JSON only (no form or multipart bodies), read to at most API_MAX_BODY_BYTES + 1 bytes."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.API_MAX_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(BODY_TOO_LARGE.format(limit=limit))
        try:
            return json_loads_checked(raw)
        except JSONRefused as exc:
            raise MalformedRequest(exc.message, fields=exc.fields) from exc
