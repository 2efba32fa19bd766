"""The one JSON parser of the API: every request body passes its guard before a serializer sees it.

PostgreSQL cannot store NUL in text or jsonb, psycopg cannot encode a lone surrogate, and
Python's JSON decoder overflows the stack on deep nesting: each would be a 500 deep inside a
service. Refusing them here, once, keeps every endpoint's bad input a 400 with one body.
"""

import json

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

from core.errors import BODY_TOO_LARGE

# Deeper than any memory, checkpoint or tool payload needs; far below the ~1,000 frames at
# which the decoder, the serializers and psycopg's jsonb dumper start to recurse out of stack.
JSON_MAX_DEPTH = 64

JSON_NOT_UTF8 = "The request body is not valid UTF-8."
JSON_MALFORMED = "The request body is not valid JSON: {detail}"
JSON_TOO_DEEP = f"The request body is nested deeper than {JSON_MAX_DEPTH} levels."
JSON_NUL = "The request body contains a NUL character (\\u0000), which cannot be stored."
JSON_SURROGATE = "The request body contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text."
JSON_CONSTANT = "NaN and Infinity are not JSON numbers."


class MalformedRequest(exceptions.ParseError):
    default_code = "malformed_request"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


def _refuse_constant(name):
    raise ValueError(JSON_CONSTANT)


def json_check(value) -> None:
    """Raise MalformedRequest if a decoded document nests too deep or holds text PostgreSQL refuses.

    Iterative, so a document that reached here cannot overflow the stack while it is checked.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _text_check(item)
        elif isinstance(item, dict | list):
            if depth > JSON_MAX_DEPTH:
                raise MalformedRequest(JSON_TOO_DEEP)
            if isinstance(item, dict):
                for key, child in item.items():
                    _text_check(key)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)


def _text_check(text: str) -> None:
    if "\x00" in text:
        raise MalformedRequest(JSON_NUL)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedRequest(JSON_SURROGATE) from exc


def json_loads_guarded(raw: bytes):
    """Decode a JSON body under the API's rules; MalformedRequest names what was wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest(JSON_NOT_UTF8) from exc
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise MalformedRequest(JSON_TOO_DEEP) from exc
    except ValueError as exc:
        if str(exc) == JSON_CONSTANT:
            raise MalformedRequest(JSON_CONSTANT) from exc
        raise MalformedRequest(JSON_MALFORMED.format(detail=exc)) from exc
    json_check(value)
    return value


class GuardedJSONParser(JSONParser):
    """JSON only (no form or multipart bodies), read to at most API_MAX_BODY_BYTES + 1 bytes."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.API_MAX_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(BODY_TOO_LARGE.format(limit=limit))
        return json_loads_guarded(raw)
