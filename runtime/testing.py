"""Live server processes for tests: the REST API under gunicorn and the MCP server.

Both run as real child processes on a free 127.0.0.1 port against the test database,
so tests exercise the same HTTP stack a deployed client talks to. Tests that use them
must see committed rows (pytest's `transactional_db` or a `TransactionTestCase`).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.testing import database_url, free_port

ROOT = Path(__file__).resolve().parents[1]


def server_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        # The test settings run Celery tasks inline and use a process-local cache,
        # so the child needs no broker.
        "DJANGO_SETTINGS_MODULE": "memory_project.settings.test",
        "DATABASE_URL": database_url(),
        "DATABASE_CONN_MAX_AGE": "0",
        "HF_HUB_OFFLINE": "1",
        # The live servers read beside the request (the context's parts), so that path is
        # tested too.
        "SIDE_READ_THREADS": "4",
        **extra,
    }


class LiveProcess:
    """A child process serving HTTP on `port`; `stop()` ends it by its pid."""

    def __init__(self, command: list[str], port: int, ready_path: str, env: dict[str, str] | None = None):
        self.command = command
        self.port = port
        self.ready_path = ready_path
        self.env = env or server_env()
        self.process: subprocess.Popen | None = None
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"memory-live-{port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "LiveProcess":
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        self.process = subprocess.Popen(
            self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command[:3]} exited early:\n{self.log_path.read_text()[-4000:]}")
            try:
                httpx.get(self.url + self.ready_path, timeout=1.0)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        log_tail = self.log_path.read_text()[-4000:]
        raise RuntimeError(f"{self.command[:3]} did not answer within {timeout}s:\n{log_tail}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Its tail was shown if it failed to start; nothing reads it after the process.
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "LiveProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def live_api_server() -> LiveProcess:
    """gunicorn serving memory_project.wsgi (2 workers x 4 threads)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "memory_project.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--threads",
        "4",
        "--timeout",
        "300",
        "--log-level",
        "warning",
    ]
    return LiveProcess(command, port, "/healthz")


def live_mcp_server(env: dict[str, str] | None = None) -> LiveProcess:
    """`manage.py mcp_server` in its own process (`env`: `server_env()` by default)."""
    port = free_port()
    command = [sys.executable, "manage.py", "mcp_server", "--host", "127.0.0.1", "--port", str(port)]
    return LiveProcess(command, port, "/healthz", env=env)


def mcp_http_post(client, body, *, key: str = "mem_some_key"):
    """POST a JSON-RPC `body` to the MCP app of `client` (the `mcp_http` fixture) as a client
    of MCP's streamable HTTP sends it."""
    from runtime import mcp

    return client.post(
        mcp.MCP_PATH,
        json=body,
        headers={
            "Authorization": f"Bearer {key}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
    )
