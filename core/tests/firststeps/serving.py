"""`manage.py serve` as a newcomer runs it: a real process on its own var dir, stopped by its pid.

Each instance gets a fresh MEMORY_VAR_DIR and nothing configured, so it starts its own
embedded PostgreSQL and Valkey there, exactly as `scripts/run` on a fresh checkout does.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[3]
# Two instances start side by side on 2 shared cores: initdb, migrations and every child
# loading the embedding model.
READY_TIMEOUT = 300.0
STOP_TIMEOUT = 90.0
# What a newcomer's shell would not have: the test run's own database, broker and settings.
_NOT_INHERITED = (
    "DATABASE_URL",
    "DATABASE_REPLICA_URL",
    "CELERY_BROKER_URL",
    "CACHE_URL",
    "DJANGO_SETTINGS_MODULE",
    "MEMORY_VAR_DIR",
    "EMBEDDING_BASE_URL",
    "EMBEDDING_MODEL",
    "LLM_BASE_URL",
)

API_KEY = re.compile(r"API key[^:\n]*:\s*(mem_\S+)")
OPERATOR_LOGIN = re.compile(r"Operator login:\s*(\S+)\s*/\s*(\S+)")


class ServeInstance:
    def __init__(self, var_dir: Path, *args: str):
        self.var_dir = var_dir
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = var_dir.parent / f"{var_dir.name}-serve.log"
        env = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
        env.update(
            MEMORY_VAR_DIR=str(var_dir),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "serve", "--port=0", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Its own session: a SIGINT sent to the test's process group never reaches it.
            start_new_session=True,
        )
        self.listening: dict = {}
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    @property
    def url(self) -> str:
        return self.listening["web_url"].rstrip("/")

    def api_key(self) -> str:
        match = API_KEY.search(self.output())
        assert match, f"no API key printed:\n{self.output()[-3000:]}"
        return match.group(1)

    def operator_login(self) -> tuple[str, str]:
        match = OPERATOR_LOGIN.search(self.output())
        assert match, f"no operator login printed:\n{self.output()[-3000:]}"
        return match.group(1), match.group(2)

    def wait_listening(self, timeout: float = READY_TIMEOUT) -> dict:
        """serve.json, written once every child has been started."""
        state = self.var_dir / "serve.json"
        self._wait(lambda: state.exists() and state.read_text().strip().endswith("}"), timeout, "serve.json")
        self.listening = json.loads(state.read_text())
        return self.listening

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> dict:
        """The first 200 body of /readyz, once serve has printed that every address it gave
        answers (the MCP port binds on its own schedule)."""
        if not self.listening:
            self.wait_listening(timeout)
        body = {}

        def ready() -> bool:
            nonlocal body
            try:
                response = httpx.get(f"{self.url}/readyz", timeout=5)
            except httpx.HTTPError:
                return False
            body = response.json()
            return response.status_code == 200

        self._wait(ready, timeout, f"/readyz 200 (last: {body})")
        self._wait(lambda: "Ready after" in self.output(), timeout, "the 'Ready after' line")
        return body

    def _wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.popen.poll() is not None:
                status = self.popen.returncode
                raise AssertionError(f"serve exited ({status}) before {what}:\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s:\n{self.output()[-4000:]}")
            time.sleep(0.5)

    def interrupt_send(self) -> None:
        """Ctrl-C, as a person at the terminal stops it."""
        if self.popen.poll() is None:
            os.kill(self.pid, signal.SIGINT)

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        self.returncode = self.popen.wait(timeout=timeout)
        self._log.close()
        return self.returncode

    def stop(self) -> None:
        """Whatever is left after a failed test: SIGTERM, then SIGKILL to its own pid only."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if not self._log.closed:
            self._log.close()
