"""Keep a set of child processes running: restart the ones that die, with capped backoff.

`manage.py serve` runs the Celery worker, beat, the MCP server and gunicorn under one
`Supervisor`. A child that dies (kill -9, OOM, a crash) is logged and started again after
a delay that doubles with every quick death (1 s, 2 s, 4 s ... at most `backoff_max`), so a
child that crashes at start-up costs a process start per minute, not a CPU. Only `stop()`
stops children, in the reverse order of their start.

Nothing here imports Django. Children are only ever signalled by the process (group) id
this module started them with.
"""

import contextlib
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class ChildSpec:
    name: str
    command: list[str]
    env: dict | None = None
    # Seconds a child gets to exit after SIGTERM before SIGKILL.
    stop_timeout: float = 20.0


@dataclass
class Child:
    spec: ChildSpec
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    # Deaths in a row that came sooner than `stable_after` after their start.
    failures: int = 0
    restarts: int = 0
    restart_at: float | None = None
    pids: list[int] = field(default_factory=list)


class Supervisor:
    def __init__(
        self,
        specs: list[ChildSpec],
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        stable_after: float = 30.0,
        clock=time.monotonic,
        popen_kwargs: dict | None = None,
    ):
        self.children = [Child(spec=spec) for spec in specs]
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self.clock = clock
        self.popen_kwargs = popen_kwargs or {}

    def child(self, name: str) -> Child:
        return next(child for child in self.children if child.spec.name == name)

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        # A new session each: a Ctrl-C in the terminal reaches only the supervising process,
        # which stops the children in order, and a child's own processes share its group id.
        child.process = subprocess.Popen(
            child.spec.command, env=child.spec.env, start_new_session=True, **self.popen_kwargs
        )
        child.started_at = self.clock()
        child.restart_at = None
        child.pids.append(child.process.pid)

    def backoff(self, failures: int) -> float:
        """Delay before the restart that follows `failures` quick deaths in a row (1 or more)."""
        return min(self.backoff_max, self.backoff_initial * 2 ** max(0, failures - 1))

    def poll(self) -> None:
        """Notice children that died and (re)start those whose delay has passed."""
        now = self.clock()
        for child in self.children:
            process = child.process
            if process is not None and process.poll() is not None:
                uptime = now - child.started_at
                child.failures = 1 if uptime >= self.stable_after else child.failures + 1
                delay = self.backoff(child.failures)
                child.restart_at = now + delay
                child.process = None
                # Its own children (a pool, gunicorn workers) would hold its sockets and
                # keep running jobs nobody acknowledges.
                _kill_group(process.pid)
                logger.warning(
                    "%s (pid %d) exited with %s after %.1f s; restarting in %.1f s",
                    child.spec.name,
                    process.pid,
                    _describe(process.returncode),
                    uptime,
                    delay,
                )
            if child.process is None and child.restart_at is not None and now >= child.restart_at:
                self._spawn(child)
                child.restarts += 1
                logger.warning("%s restarted (pid %d)", child.spec.name, child.process.pid)

    def run(self, stopping, interval: float = 0.5, on_poll=None) -> None:
        """Supervise until `stopping` (a threading.Event) is set; `on_poll()` runs after
        every poll (serve restarts its embedded servers there)."""
        while not stopping.wait(interval):
            self.poll()
            if on_poll is not None:
                on_poll()

    def stop(self) -> None:
        """Stop every child, last started first, each given its stop_timeout to exit."""
        for child in reversed(self.children):
            process, child.process, child.restart_at = child.process, None, None
            if process is None:
                continue
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=child.spec.stop_timeout)
                except subprocess.TimeoutExpired:
                    logger.warning(
                        "%s did not stop within %.0f s; killing it", child.spec.name, child.spec.stop_timeout
                    )
                    process.kill()
                    process.wait()
            _kill_group(process.pid)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"status {returncode}"
