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
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import close_old_connections
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from rest_framework.exceptions import ValidationError as DrfValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from core.access import principal_for_api_key
from core.authentication import INVALID_KEY
from core.errors import ApplicationError, error_body
from core.parsers import JSONRefused, json_check
from core.selectors import api_key_authenticate
from runtime import tools

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
PRINCIPAL_SCOPE_KEY = "memory.principal"
MISSING_KEY = "Send `Authorization: Bearer <api key>`."

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
        principal = await sync_to_async(_principal_for_secret, thread_sensitive=False)(parts[1])
        if principal is None:
            return await self._refuse(scope, receive, send, INVALID_KEY)
        scope = dict(scope)
        scope[PRINCIPAL_SCOPE_KEY] = principal
        return await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope, receive, send, message: str):
        response = JSONResponse(
            error_body("not_authenticated", message),
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="mcp"'},
        )
        await response(scope, receive, send)


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ApplicationError):
        body = error_body(exc.code, exc.message, exc.fields)
    elif isinstance(exc, JSONRefused):
        body = error_body("malformed_request", exc.message, exc.fields)
    elif isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        body = error_body("invalid", "Invalid input.", fields)
    else:
        body = error_body("invalid", "Invalid input.", json.loads(json.dumps(exc.detail, default=str)))
    return json.dumps(body)


def _call(fn, principal, arguments: dict[str, Any]) -> dict[str, Any]:
    close_old_connections()
    try:
        return fn(principal=principal, **arguments)
    finally:
        close_old_connections()


async def _run_tool(ctx: Context, fn, arguments: dict[str, Any]) -> dict[str, Any]:
    request = ctx.request_context.request
    principal = request.scope.get(PRINCIPAL_SCOPE_KEY) if request is not None else None
    if principal is None:
        raise ToolError(json.dumps(error_body("not_authenticated", MISSING_KEY)))
    try:
        # Tool arguments arrive as JSON outside DRF: the same guard as a request body keeps
        # NUL, lone surrogates and deep nesting from reaching PostgreSQL.
        json_check(arguments)
        return await sync_to_async(_call, thread_sensitive=False)(fn, principal, arguments)
    except (JSONRefused, ApplicationError, DjangoValidationError, DrfValidationError) as exc:
        # The model reads the same error body the REST API returns.
        raise ToolError(_error_text(exc)) from exc


def build_server() -> MCPServer:
    server = MCPServer("memory-server", instructions=INSTRUCTIONS, version="1.0.0")
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)

    for spec in tools.TOOLS:
        server.add_tool(
            _make_tool(spec),
            name=spec.name,
            description=inspect.cleandoc(spec.description),
            annotations=read_only if spec.read_only else writes,
            structured_output=True,
        )

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return server


def _make_tool(spec):
    """An async MCP tool with `spec.fn`'s signature (minus `principal`) plus the MCP context."""

    signature = inspect.signature(spec.fn)
    parameters = [p for name, p in signature.parameters.items() if name != "principal"]
    parameters.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))

    async def tool(**kwargs) -> dict[str, Any]:
        ctx = kwargs.pop("ctx")
        return await _run_tool(ctx, spec.fn, kwargs)

    tool.__name__ = spec.name
    tool.__doc__ = spec.description
    tool.__signature__ = signature.replace(parameters=parameters, return_annotation=dict[str, Any])
    tool.__annotations__ = {
        **{p.name: p.annotation for p in parameters},
        "return": dict[str, Any],
    }
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
