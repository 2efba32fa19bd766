"""Serve the MCP tools over streamable HTTP in this process (uvicorn)."""

import uvicorn
from django.core.management.base import BaseCommand
from django.db import connections

from core.lib.postgresql.base import request_limits_apply
from runtime.mcp import MCP_PATH, mcp_app


class Command(BaseCommand):
    help = "Run the MCP server (streamable HTTP at /mcp, authenticated with API keys)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument(
            "--allowed-host",
            action="append",
            dest="allowed_hosts",
            help="Host header to accept (repeatable; e.g. mcp.example.com:*). "
            "Localhost is accepted by default when binding to a loopback address.",
        )
        parser.add_argument("--log-level", default="warning")

    def handle(self, *args, host, port, allowed_hosts, log_level, **options):
        # This process serves requests: its statements and lock waits are limited, as a web
        # process's are (memory_project.wsgi). A connection opened before now is closed, so
        # that the next one carries the limits.
        request_limits_apply()
        connections.close_all()
        app = mcp_app(host=host, allowed_hosts=allowed_hosts)
        self.stdout.write(f"MCP server on http://{host}:{port}{MCP_PATH}")
        uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="on")
