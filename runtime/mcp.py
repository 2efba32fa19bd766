"""The MCP server: the agent tools over streamable HTTP, with the REST API's keys and scoping.

`mcp_app()` returns an ASGI app (Starlette, from the official `mcp` SDK) wrapped in
`ApiKeyMiddleware`: every HTTP request to the MCP endpoint must carry
``Authorization: Bearer <api key>``; the key is checked with
`core.selectors.api_key_authenticate` and turned into a `Principal` with
`core.access.principal_for_api_key`, exactly as the REST API does, and each tool call
acts as that principal (workspace, agent restriction, read-only). The tools themselves
live in `runtime.tools` as plain synchronous functions over the Django services.

The server runs stateless (each POST carries its own key and needs no session state),
so any number of processes can serve behind one load balancer.
"""

import inspect
import json
import logging
import math
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse

from core.access import principal_for_api_key
from core.authentication import INVALID_KEY
from core.errors import BODY_TOO_LARGE, backend_error, error_body
from core.memory_settings import memory_settings_for
from core.selectors import api_key_authenticate
from core.throttling import api_key_budget_wait
from runtime import tools
from runtime.tool_calls import ToolFailed, tool_backend_failure, tool_execute, tool_unknown_body
from runtime.tool_schemas import OUTPUT_SCHEMA, SCHEMA_MCP, tool_render

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
PRINCIPAL_SCOPE_KEY = "memory.principal"
RETRY_AFTER_SCOPE_KEY = "memory.retry_after"
MISSING_KEY = "Send `Authorization: Bearer <api key>`."
THROTTLED = "Request was throttled. Expected available in {seconds} seconds."
# JSON-RPC 2.0's Invalid Request: the message is no valid request object.
JSONRPC_INVALID_REQUEST = -32600
REQUEST_ID_INVALID = "Invalid Request: a request's id is a string or an integer."

INSTRUCTIONS = (
    "Durable memory for this agent. Call `context` at the start of every turn with the user's "
    "message: it returns the user profile, session memory, relevant episodic memories, triggered "
    "procedures and the history window within a token budget. Use `remember` for stable facts "
    "and preferences, `recall` / `recall_memory` to look things up deliberately, `identify_user` "
    "to map a channel identity to a person and `history` for the conversation window."
)


def _principal_for_secret(secret: str):
    close_old_connections()
    try:
        api_key = api_key_authenticate(secret=secret)
        return principal_for_api_key(api_key) if api_key is not None else None
    finally:
        close_old_connections()


class ApiKeyMiddleware:
    """Authenticate every MCP HTTP request with an API key; 401 with the API's error body otherwise."""

    def __init__(self, app, *, protected_prefix: str = MCP_PATH):
        self.app = app
        self.protected_prefix = protected_prefix

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.protected_prefix):
            return await self.app(scope, receive, send)
        header = ""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return await self._refuse(scope, receive, send, MISSING_KEY)
        try:
            principal = await sync_to_async(_principal_for_secret, thread_sensitive=False)(parts[1])
        except Exception as exc:
            # The database is down or out of time: the REST API's 503, not a bare 500.
            failure = backend_error(exc)
            if failure is None:
                raise
            status, body, headers = failure
            return await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)
        if principal is None:
            return await self._refuse(scope, receive, send, INVALID_KEY)
        # The key's one request budget, shared with the REST API (core.throttling).
        wait = await sync_to_async(api_key_budget_wait, thread_sensitive=False)(principal.api_key)
        if wait is not None:
            seconds = math.ceil(wait)
            response = JSONResponse(
                error_body("throttled", THROTTLED.format(seconds=seconds)),
                status_code=429,
                headers={"Retry-After": str(seconds)},
            )
            return await response(scope, receive, send)
        if scope.get("method") == "POST":
            receive = await _request_id_checked(scope, receive, send)
            if receive is None:
                return
        scope = dict(scope)
        scope[PRINCIPAL_SCOPE_KEY] = principal
        # A list, shared by any copy of the scope the SDK makes: _run_tool adds to it.
        retry_after = scope[RETRY_AFTER_SCOPE_KEY] = []

        async def send_with_retry_after(message):
            if message["type"] == "http.response.start" and retry_after:
                headers = [*message.get("headers", ()), (b"retry-after", str(max(retry_after)).encode())]
                message = {**message, "headers": headers}
            await send(message)

        return await self.app(scope, receive, send_with_retry_after)

    @staticmethod
    async def _refuse(scope, receive, send, message: str):
        response = JSONResponse(
            error_body("not_authenticated", message),
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="mcp"'},
        )
        await response(scope, receive, send)


def _request_id_valid(value) -> bool:
    """An id the server can answer: JSON-RPC 2.0 allows a string, a number or null, and MCP
    narrows it to a string or an integer (`RequestId`, never null; the SDK reads 7.0 or null
    as no id at all, that is as a notification)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


async def _request_id_checked(scope, receive, send):
    """The request's `receive`, its body read once and replayed to the SDK; None when it has
    been answered here instead:
    - a body larger than API_MAX_BODY_BYTES: the REST API's 413, read no further (the SDK
      read any body whole);
    - a request whose id is none the server can answer (an object, an array, a bool, a
      fraction, null): JSON-RPC's Invalid Request error (-32600, id null, HTTP 400, as the
      SDK answers a message it cannot read). The SDK read such a message as a notification
      and answered 202 with no body, so the client waited for an answer that never came."""
    limit = settings.API_MAX_BODY_BYTES
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit:
            body = error_body("payload_too_large", BODY_TOO_LARGE.format(limit=limit))
            await JSONResponse(body, status_code=413)(scope, receive, send)
            return None
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None
    # Without an id member the message is a notification, which gets no answer.
    if (
        isinstance(parsed, dict)
        and "method" in parsed
        and "id" in parsed
        and not _request_id_valid(parsed["id"])
    ):
        response = JSONResponse(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": JSONRPC_INVALID_REQUEST, "message": REQUEST_ID_INVALID},
            },
            status_code=400,
        )
        await response(scope, receive, send)
        return None
    replayed = False

    async def replay():
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _call(name: str, principal, arguments: dict[str, Any]) -> dict[str, Any]:
    close_old_connections()
    try:
        return tool_execute(principal=principal, name=name, arguments=arguments)
    finally:
        close_old_connections()


async def _run_tool(ctx: Context, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    request = ctx.request_context.request
    principal = request.scope.get(PRINCIPAL_SCOPE_KEY) if request is not None else None
    if principal is None:
        raise ToolError(json.dumps(error_body("not_authenticated", MISSING_KEY)))
    try:
        # runtime.tool_calls checks the arguments (JSON guard, the tool's JSON Schema) exactly
        # as for POST /api/v1/tools/call/.
        return await sync_to_async(_call, thread_sensitive=False)(name, principal, arguments)
    except ToolFailed as failed:
        _retry_after_note(request, failed)
        # The model reads the same error body the REST API returns.
        raise ToolError(json.dumps(failed.body)) from failed
    except Exception as exc:
        # A database that is down or out of time (the request limits, core.lib.postgresql):
        # the REST API's body, which tells the model to retry, not the SDK's bare
        # "Error executing tool".
        failed = tool_backend_failure(exc)
        if failed is None:
            raise
        _retry_after_note(request, failed)
        raise ToolError(json.dumps(failed.body)) from exc


def _retry_after_note(request, failed: ToolFailed) -> None:
    """Tell ApiKeyMiddleware to send Retry-After with this HTTP response: a call the database
    failed transiently is an error result inside a 200, as on POST /api/v1/tools/call/."""
    holder = request.scope.get(RETRY_AFTER_SCOPE_KEY) if request is not None else None
    if failed.retry_after is not None and holder is not None:
        holder.append(failed.retry_after)


class MemoryMCPServer(MCPServer):
    """The SDK's server, answering a call to an unknown tool with the API's `unknown_tool`
    body (as POST /api/v1/tools/call/ does) instead of the SDK's plain "Unknown tool: x"."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None):
        if name not in {spec.name for spec in tools.TOOLS}:
            # The SDK answers a ToolError as the call's result with isError and its text.
            raise ToolError(json.dumps(tool_unknown_body(name)))
        return await super().call_tool(name, arguments, context)


class RawArguments(ArgModelBase):
    """Hands a tool call's arguments through untouched: runtime.tool_calls validates them
    against the tool's JSON Schema, which is also the schema the server lists."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def build_server() -> MCPServer:
    server = MemoryMCPServer("memory-server", instructions=INSTRUCTIONS, version="1.0.0")
    defaults = memory_settings_for(None)
    for spec in tools.TOOLS:
        listed = tool_render(spec, SCHEMA_MCP, defaults)
        server.add_tool(
            _make_tool(spec),
            name=spec.name,
            description=listed["description"],
            annotations=ToolAnnotations(**listed["annotations"]),
            structured_output=True,
        )
        # The listed schemas are the ToolSpec's (the same as GET /api/v1/tools/?schema=mcp),
        # not the ones the SDK derives from the function signature; the SDK passes the raw
        # arguments on and runtime.tool_calls validates them against that schema.
        registered = server._tool_manager.get_tool(spec.name)
        registered.parameters = listed["inputSchema"]
        registered.fn_metadata.arg_model = RawArguments
        registered.fn_metadata.output_schema = OUTPUT_SCHEMA

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return server


def _make_tool(spec):
    """An async MCP tool taking the MCP context and the call's raw arguments."""

    async def tool(ctx: Context, **arguments) -> dict[str, Any]:
        return await _run_tool(ctx, spec.name, arguments)

    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    tool.__name__ = spec.name
    tool.__doc__ = spec.description
    # Registration sees only the context parameter; the arguments model is swapped for
    # RawArguments right after (build_server).
    tool.__signature__ = inspect.Signature(parameters, return_annotation=dict[str, Any])
    tool.__annotations__ = {"ctx": Context, "return": dict[str, Any]}
    return tool


def mcp_app(*, host: str = "127.0.0.1", allowed_hosts: list[str] | None = None):
    """The ASGI app: `/mcp` (streamable HTTP, API-key auth) and `/healthz`."""
    server = build_server()
    security = None
    if allowed_hosts:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts
        )
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=security,
        host=host,
    )
    return ApiKeyMiddleware(app)
