"""serve's "Ready after" line promises every address it printed: the web server's /readyz and,
when there is one, the MCP server's port (the first-steps test once connected to MCP between
the two and was refused)."""

import io
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.management.commands.serve import Command

HOST = "127.0.0.1"


class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ready"}')

    def log_message(self, *args):
        pass


@pytest.fixture
def web():
    server = ThreadingHTTPServer((HOST, 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{HOST}:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def mcp_port():
    """A port reserved for the MCP server, not yet listening."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _announcing(web_url, **kwargs):
    command = Command(stdout=io.StringIO(), stderr=io.StringIO())
    stopping = threading.Event()
    thread = threading.Thread(
        target=command._announce_ready, args=(web_url, stopping), kwargs={"poll": 0.05, **kwargs}, daemon=True
    )
    thread.start()
    return command, thread, stopping


def test_ready_waits_for_the_mcp_server_to_accept(web, mcp_port):
    command, thread, stopping = _announcing(web, mcp=(HOST, mcp_port))
    try:
        thread.join(0.5)
        assert thread.is_alive(), command.stdout.getvalue()
        assert "Ready" not in command.stdout.getvalue()
        with socket.socket() as server:
            server.bind((HOST, mcp_port))
            server.listen()
            thread.join(5)
            assert not thread.is_alive()
        assert "Ready after" in command.stdout.getvalue()
    finally:
        stopping.set()


def test_without_mcp_the_web_decides(web):
    command, thread, stopping = _announcing(web)
    thread.join(5)
    stopping.set()
    assert "Ready after" in command.stdout.getvalue()
