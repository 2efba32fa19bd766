"""Executing an agent tool call, whichever SDK produced it, and answering in the same shape.

`tool_execute` is the one path from a tool name and its arguments to a result: the MCP server
(runtime.mcp) and `POST /api/v1/tools/call/` both use it. Arguments pass the API's JSON guard
(NUL, lone surrogates, nesting) and the tool's JSON Schema (runtime.tool_schemas) before the
tool runs, so a model gets the same field errors from every transport.

Shapes accepted by `tool_call_parse`, and the result each one gets back from `tool_result`:

- OpenAI tool call `{"id", "type": "function", "function": {"name", "arguments": "<json>"}}`
  -> `{"role": "tool", "tool_call_id", "content": "<json>"}`;
- Anthropic `{"type": "tool_use", "id", "name", "input": {...}}`
  -> `{"type": "tool_result", "tool_use_id", "content": "<json>", "is_error"?: true}`;
- MCP `{"name", "arguments": {...}}`
  -> `{"content": [{"type": "text", "text": "<json>"}], "structuredContent"?, "isError"}`.

A call whose envelope is valid always gets a result; a failing tool (bad arguments, a row
that is not visible, a read-only key writing, a value the database refuses, the database
down or out of time) is a result marked as an error whose text is the API's error body, so
the model can read it and correct itself. A transient failure (the database unreachable, a
timeout, a deadlock) also carries `retryable` and `retry_after` in that body, and the response
a Retry-After header (`tool_backend_failure`). Only an envelope that is none of these shapes is
refused (`ApplicationError`, a 400 with field errors), and an exception that is none of
these (a bug) is left to the transport (a 500). Each call runs in its own transaction (a
savepoint inside a caller's): a failed call leaves nothing of itself, and the calls after it
in a list still run.
"""

import contextlib
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection, transaction
from jsonschema import Draft202012Validator, FormatChecker
from rest_framework.exceptions import ValidationError as DrfValidationError

from core.access import Principal
from core.errors import UNKNOWN_FIELD, ApplicationError, backend_error, error_body
from core.parsers import JSON_CONSTANT, JSON_TOO_DEEP, JSONRefused, json_check

SHAPE_OPENAI = "openai"
SHAPE_ANTHROPIC = "anthropic"
SHAPE_MCP = "mcp"

# One model turn rarely asks for more than a handful of calls; each runs in this request.
TOOL_CALLS_MAX = 32
TOOL_CALLS_EMPTY = "Send one tool call or a non-empty list of them."
TOOL_CALLS_TOO_MANY = f"At most {TOOL_CALLS_MAX} tool calls per request."
TOOL_CALL_SHAPE = (
    "Not a tool call: send an OpenAI tool call ({id, type: function, function: {name, arguments}}), "
    "an Anthropic tool_use block ({type: tool_use, id, name, input}) or an MCP call ({name, arguments})."
)
TOOL_CALL_ID_REQUIRED = "The call's id is required: the result refers to it."
TOOL_NAME_REQUIRED = "The tool's name is required."
TOOL_ARGUMENTS_OBJECT = "Must be a JSON object."
TOOL_ARGUMENTS_STRING = "Must be a string holding a JSON object (or the object itself)."
TOOL_ARGUMENTS_NOT_JSON = "The arguments are not valid JSON."
TOOL_UNKNOWN = "Unknown tool: {name}."
ID_MAX_CHARS = 200
NAME_MAX_CHARS = 100


class ToolFailed(Exception):
    """A tool call that produced an error for the model; `body` is the API's error body.
    `retry_after` (seconds) is set when the failure is transient (tool_backend_failure)."""

    def __init__(self, body: dict, *, retry_after: int | None = None):
        super().__init__(body["error"]["message"])
        self.body = body
        self.retry_after = retry_after


def tool_backend_failure(exc: Exception) -> ToolFailed | None:
    """The call's failure when the database refused a value or a reference (core.errors.
    backend_error's 400 and 404), or could not be reached or did not finish in time (its 503:
    unreachable, a statement or lock timeout, a deadlock or serialization failure); None for
    any other exception. A transient one, which the API answers with Retry-After, says so in
    the body, `retryable` true and `retry_after` seconds, so a model or client backs off and
    repeats only this call; the transport also sends Retry-After (runtime.apis.ToolCallApi,
    runtime.mcp)."""
    failure = backend_error(exc)
    if failure is None:
        return None
    _, body, headers = failure
    retry_after = headers.get("Retry-After")
    if retry_after is None:
        return ToolFailed(body)
    seconds = int(retry_after)
    body = {"error": {**body["error"], "retryable": True, "retry_after": seconds}}
    return ToolFailed(body, retry_after=seconds)


@dataclass(frozen=True)
class ToolCall:
    shape: str
    id: str | None
    name: str
    arguments: dict | None
    # Set when the arguments the model wrote could not be read (OpenAI's JSON string).
    arguments_error: dict | None = None


def tool_unknown_body(name: str) -> dict:
    """The error body of a call to a tool that does not exist, on every transport."""
    message = TOOL_UNKNOWN.format(name=name)
    return error_body("unknown_tool", message, {"name": [message]})


def tool_error_body(exc: Exception) -> dict:
    if isinstance(exc, ApplicationError):
        return error_body(exc.code, exc.message, exc.fields)
    if isinstance(exc, JSONRefused):
        return error_body("malformed_request", exc.message, exc.fields)
    if isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return error_body("invalid", "Invalid input.", fields)
    return error_body("invalid", "Invalid input.", json.loads(json.dumps(exc.detail, default=str)))


# The one format the tool schemas declare. Without a checker, JSON Schema treats `format` as
# a note, and an id such as "msg-42" reached the database (a 400 for the whole request).
_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("uuid", raises=ValueError)
def _is_uuid(instance) -> bool:
    if isinstance(instance, str):
        uuid.UUID(instance)
    return True


def _non_finite_arguments(arguments: dict) -> list[str]:
    """The arguments holding NaN or Infinity anywhere: OpenAI's argument string is read by
    Python's json, which accepts them, and no schema bound (minimum, maximum) refuses NaN."""
    names = []
    for name, value in arguments.items():
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, float) and not math.isfinite(item):
                names.append(name)
                break
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
    return names


def _schema_message(error) -> str:
    kind, expected = error.validator, error.validator_value
    if kind == "format" and expected == "uuid":
        return "Must be a valid UUID."
    if kind == "type":
        return f"Must be of type {' or '.join(expected) if isinstance(expected, list) else expected}."
    if kind == "enum":
        return f"Must be one of: {', '.join(str(v) for v in expected)}."
    if kind == "minimum":
        return f"Must be at least {expected}."
    if kind == "maximum":
        return f"Must be at most {expected}."
    if kind == "maxLength":
        return f"At most {expected} characters."
    if kind == "maxItems":
        return f"At most {expected} items."
    return error.message


def _schema_fields(schema: dict, arguments: dict) -> dict:
    """Field errors of `arguments` against `schema`, keyed like the API's ("a.b.0")."""
    fields: dict[str, list[str]] = {}
    for error in Draft202012Validator(schema, format_checker=_FORMATS).iter_errors(arguments):
        path = [str(part) for part in error.absolute_path]
        if error.validator == "required":
            for name in error.validator_value:
                if isinstance(error.instance, dict) and name not in error.instance:
                    fields.setdefault(".".join([*path, name]), []).append("This field is required.")
            continue
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = set(error.schema.get("properties", {}))
            for name in error.instance:
                if name not in known:
                    fields.setdefault(".".join([*path, name]), []).append(UNKNOWN_FIELD)
            continue
        fields.setdefault(".".join(path) or "arguments", []).append(_schema_message(error))
    return fields


def _json_strings_parsed(schema: dict, arguments: dict) -> dict:
    """Some MCP hosts send an object or list argument as a JSON string (the SDK's own
    argument model parsed those); such a string becomes its value when it parses to the
    type the schema asks for. A whole float where the schema asks for an integer (`2.0`,
    which JSON Schema counts as one and models often write) becomes that integer."""
    parsed = dict(arguments)
    for name, value in arguments.items():
        expected = schema.get("properties", {}).get(name, {}).get("type")
        if expected == "integer" and isinstance(value, float) and value.is_integer():
            parsed[name] = int(value)
            continue
        if isinstance(value, str) and expected in ("object", "array"):
            try:
                candidate = json.loads(value)
            except RecursionError:
                raise JSONRefused(JSON_TOO_DEEP, fields={name: [JSON_TOO_DEEP]}) from None
            except ValueError:
                continue
            if isinstance(candidate, dict if expected == "object" else list):
                parsed[name] = candidate
    return parsed


def tool_execute(*, principal: Principal, name: str, arguments: dict[str, Any]) -> dict:
    """Run tool `name` as `principal`; return its result or raise `ToolFailed`.

    A null argument counts as left out (models often send every optional argument as null).
    """
    from runtime.tool_schemas import tool_input_schema
    from runtime.tools import TOOLS

    spec = next((spec for spec in TOOLS if spec.name == name), None)
    if spec is None:
        raise ToolFailed(tool_unknown_body(name))
    schema = tool_input_schema(spec)
    try:
        # Tool arguments can arrive outside DRF's parser (MCP, OpenAI's JSON string): the
        # same guard as a request body keeps NUL, lone surrogates and deep nesting out. It
        # runs on the arguments as the tool reads them, so an object sent as JSON text is
        # guarded too.
        arguments = _json_strings_parsed(
            schema, {key: value for key, value in arguments.items() if value is not None}
        )
        json_check(arguments)
    except JSONRefused as exc:
        raise ToolFailed(tool_error_body(exc)) from exc
    fields = {name: [JSON_CONSTANT] for name in _non_finite_arguments(arguments)}
    fields = fields or _schema_fields(schema, arguments)
    if fields:
        raise ToolFailed(error_body("invalid", "Invalid input.", fields))
    try:
        with _call_transaction(spec):
            return spec.fn(principal=principal, **arguments)
    except (JSONRefused, ApplicationError, DjangoValidationError, DrfValidationError) as exc:
        raise ToolFailed(tool_error_body(exc)) from exc
    except Exception as exc:
        # A value the database refuses, a reference deleted meanwhile, the database down or
        # out of time: the API's body for this call alone. The calls before it in a list
        # have committed, so failing the whole request would have the agent repeat them.
        failed = tool_backend_failure(exc)
        if failed is None:
            raise
        raise failed from exc


def _call_transaction(spec):
    """One transaction per writing call, so a call that fails half-way leaves nothing of
    itself. A reading tool needs none (and keeps its side reads, core.lib.side_reads), nor does
    a tool that runs its own transactions around a model call (`ToolSpec.commits_in_steps`),
    except inside a caller's transaction, where a savepoint keeps that transaction usable
    after a failed statement."""
    if (spec.read_only or spec.commits_in_steps) and not connection.in_atomic_block:
        return contextlib.nullcontext()
    return transaction.atomic()


# --- envelopes -------------------------------------------------------------------------------


def _refuse(prefix: str, field_name: str, message: str):
    raise ApplicationError(message, code="invalid", fields={f"{prefix}{field_name}": [message]})


def _short_string(value, prefix: str, field_name: str, message: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        _refuse(prefix, field_name, message)
    return value


def tool_call_shape(item) -> str | None:
    """Which SDK's shape `item` has: an OpenAI call holds `function`, an Anthropic block is
    typed `tool_use`, an MCP call has a `name` and no `type`."""
    if not isinstance(item, dict):
        return None
    if "function" in item:
        return SHAPE_OPENAI
    if item.get("type") == "tool_use":
        return SHAPE_ANTHROPIC
    if "name" in item and "type" not in item:
        return SHAPE_MCP
    return None


def tool_call_parse(item, *, prefix: str = "") -> ToolCall:
    """One tool call in any of the three shapes; `prefix` names its place in a list ("0.")."""
    shape = tool_call_shape(item)
    if shape is None:
        _refuse(prefix, "non_field_errors", TOOL_CALL_SHAPE)
    if shape == SHAPE_OPENAI:
        if item.get("type", "function") != "function" or not isinstance(item["function"], dict):
            _refuse(prefix, "function", TOOL_CALL_SHAPE)
        call_id = _short_string(item.get("id"), prefix, "id", TOOL_CALL_ID_REQUIRED, ID_MAX_CHARS)
        function = item["function"]
        name = _short_string(
            function.get("name"), prefix, "function.name", TOOL_NAME_REQUIRED, NAME_MAX_CHARS
        )
        raw = function.get("arguments", "{}")
        if isinstance(raw, dict):
            return ToolCall(SHAPE_OPENAI, call_id, name, raw)
        if not isinstance(raw, str):
            _refuse(prefix, "function.arguments", TOOL_ARGUMENTS_STRING)
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except RecursionError:
            # The body around the string is shallow, so the parser guard did not see this.
            return ToolCall(
                SHAPE_OPENAI,
                call_id,
                name,
                None,
                error_body("invalid", JSON_TOO_DEEP, {"arguments": [JSON_TOO_DEEP]}),
            )
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            message = TOOL_ARGUMENTS_NOT_JSON if arguments is None else TOOL_ARGUMENTS_OBJECT
            return ToolCall(
                SHAPE_OPENAI, call_id, name, None, error_body("invalid", message, {"arguments": [message]})
            )
        return ToolCall(SHAPE_OPENAI, call_id, name, arguments)
    if shape == SHAPE_ANTHROPIC:
        call_id = _short_string(item.get("id"), prefix, "id", TOOL_CALL_ID_REQUIRED, ID_MAX_CHARS)
        name = _short_string(item.get("name"), prefix, "name", TOOL_NAME_REQUIRED, NAME_MAX_CHARS)
        arguments = item.get("input", {})
        if not isinstance(arguments, dict):
            _refuse(prefix, "input", TOOL_ARGUMENTS_OBJECT)
        return ToolCall(SHAPE_ANTHROPIC, call_id, name, arguments)
    name = _short_string(item.get("name"), prefix, "name", TOOL_NAME_REQUIRED, NAME_MAX_CHARS)
    arguments = item.get("arguments") or {}
    if not isinstance(arguments, dict):
        _refuse(prefix, "arguments", TOOL_ARGUMENTS_OBJECT)
    return ToolCall(SHAPE_MCP, None, name, arguments)


def tool_calls_parse(data) -> tuple[list[ToolCall], bool]:
    """The calls in a request body (one call or a list of them) and whether it was a list."""
    if isinstance(data, list):
        if not data:
            raise ApplicationError(TOOL_CALLS_EMPTY, fields={"non_field_errors": [TOOL_CALLS_EMPTY]})
        if len(data) > TOOL_CALLS_MAX:
            raise ApplicationError(TOOL_CALLS_TOO_MANY, fields={"non_field_errors": [TOOL_CALLS_TOO_MANY]})
        return [tool_call_parse(item, prefix=f"{index}.") for index, item in enumerate(data)], True
    if not isinstance(data, dict):
        raise ApplicationError(TOOL_CALLS_EMPTY, fields={"non_field_errors": [TOOL_CALLS_EMPTY]})
    return [tool_call_parse(data)], False


def tool_result(call: ToolCall, *, result: dict | None = None, error: dict | None = None) -> dict:
    """The answer to `call` in its own shape: `result` (the tool's JSON) or `error` (an error body)."""
    text = json.dumps(error if error is not None else result, ensure_ascii=False)
    if call.shape == SHAPE_OPENAI:
        return {"role": "tool", "tool_call_id": call.id, "content": text}
    if call.shape == SHAPE_ANTHROPIC:
        block = {"type": "tool_result", "tool_use_id": call.id, "content": text}
        if error is not None:
            block["is_error"] = True
        return block
    answer = {"content": [{"type": "text", "text": text}], "isError": error is not None}
    if error is None:
        answer["structuredContent"] = result
    return answer


def tool_call_run(*, principal: Principal, call: ToolCall) -> dict:
    """Execute one parsed call and answer it in its shape."""
    return _tool_call_answer(principal=principal, call=call)[0]


def tool_calls_run(*, principal: Principal, calls: list[ToolCall]) -> tuple[list[dict], int | None]:
    """Execute `calls` in order; their answers, and the longest `retry_after` of the calls
    that failed transiently (None when none did), for the response's Retry-After."""
    answers, waits = [], []
    for call in calls:
        answer, retry_after = _tool_call_answer(principal=principal, call=call)
        answers.append(answer)
        if retry_after is not None:
            waits.append(retry_after)
    return answers, max(waits, default=None)


def _tool_call_answer(*, principal: Principal, call: ToolCall) -> tuple[dict, int | None]:
    if call.arguments_error is not None:
        return tool_result(call, error=call.arguments_error), None
    try:
        result = tool_execute(principal=principal, name=call.name, arguments=call.arguments)
    except ToolFailed as failed:
        return tool_result(call, error=failed.body), failed.retry_after
    return tool_result(call, result=result), None
