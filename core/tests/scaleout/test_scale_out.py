"""Two webs, two workers and two beats on one database and broker: every effect happens once (issue 12).

Everything is driven over HTTP, against both webs at once, and checked with SQL on table
names, so that the test does not depend on which app holds a model or what a task is called.
"""

import ast
import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test import TransactionTestCase

from core.lib.embedded import EmbeddedValkey
from core.models import WorkerHeartbeat
from core.services import agent_register, api_key_create, provider_credential_set, workspace_create
from core.testing import database_url, free_port
from core.testing_openai import OpenAITestServer
from identities.services import memory_user_create
from memory_project.celery import app

ROOT = Path(__file__).resolve().parents[3]
SCHEDULER = "core.lib.beat:LockedPersistentScheduler"
# Generous for 2 shared cores: six Django processes start side by side.
START_TIMEOUT = 90.0
SETTLE_TIMEOUT = 60.0
EMBEDDING_DIMENSIONS = 64
TASK_SUCCEEDED = re.compile(
    r"Task \S+\[(?P<id>[0-9a-f-]{36})\] succeeded in [0-9.e-]+s: (?P<result>.*)$", re.M
)


def _vectors(texts: list[str]) -> list[list[float]]:
    """Centred hash vectors: two different texts are nearly orthogonal, so none is a "similar duplicate"."""
    vectors = []
    for text in texts:
        digest = b"".join(hashlib.sha256(f"{i}:{text}".encode()).digest() for i in range(2))
        vectors.append([(byte - 127.5) / 127.5 for byte in digest[:EMBEDDING_DIMENSIONS]])
    return vectors


def _rows(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _wait_for(condition, *, timeout: float, interval: float = 0.2):
    """The first truthy value of `condition()` within `timeout`, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


class Process:
    """A child process with its output in a file, leading a process group of its own, so that
    stopping it stops what it started (gunicorn's workers, a fork of a worker) and nothing else:
    the group is named by the child's own pid."""

    def __init__(self, name: str, args: list[str], env: dict, log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """The process alone dies at once, as in a crash; its group goes in `stop`."""
        os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def _signal_group(self, sig: int) -> None:
        # ProcessLookupError: nothing of the group is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.popen.wait()
        # Whatever it left behind (or what a crash orphaned) goes too.
        self._signal_group(signal.SIGKILL)
        self._log.close()


@pytest.mark.slow
class ScaleOutTests(TransactionTestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp(prefix="memory-test-scaleout-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.valkey = EmbeddedValkey(self.root / "valkey", self.root / "valkey" / "v.sock")
        self.valkey.start()
        self.addCleanup(self.valkey.stop)
        self.embeddings = OpenAITestServer()
        self.embeddings.embedding_handler = _vectors
        self.embeddings.__enter__()
        self.addCleanup(self.embeddings.__exit__, None, None, None)
        self._seed()
        self.processes: dict[str, Process] = {}
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memory_project.settings.development",
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": self.valkey.url,
            "CACHE_URL": f"unix://{self.valkey.socket_path}?db=1",
            "MEMORY_VAR_DIR": str(self.root),
            "LOG_LEVEL": "INFO",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        python = sys.executable
        self.webs = []
        for name in ("web-a", "web-b"):
            port = free_port()
            self._start(
                name,
                [
                    python,
                    "-m",
                    "gunicorn",
                    "memory_project.wsgi:application",
                    f"--bind=127.0.0.1:{port}",
                    "--workers=1",
                    "--threads=4",
                    "--graceful-timeout=5",
                    "--no-control-socket",
                ],
                env,
            )
            self.webs.append(f"http://127.0.0.1:{port}")
        for name in ("worker-a", "worker-b"):
            self._start(
                name,
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "memory_project",
                    "worker",
                    "--pool=solo",
                    "--loglevel=INFO",
                    f"--hostname={name}@%h",
                    "--without-mingle",
                    "--without-gossip",
                ],
                env,
            )
        beat_env = {**env, "DJANGO_SETTINGS_MODULE": "core.tests.scaleout.beat_settings"}
        for name in ("beat-a", "beat-b"):
            self._start(
                name,
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "memory_project",
                    "beat",
                    f"--scheduler={SCHEDULER}",
                    f"--schedule={self.root / (name + '-schedule')}",
                    f"--pidfile={self.root / (name + '.pid')}",
                    "--loglevel=INFO",
                ],
                beat_env,
            )
        self._broker_use()
        self._wait_until_started()

    # --- set-up --------------------------------------------------------------------------

    def _seed(self):
        workspace = workspace_create(name="scale-out")
        # A small window and context: 30 short messages pass the compaction threshold.
        self.agent = agent_register(
            workspace=workspace,
            slug="scaler",
            memory_settings={
                "semantic_recall": True,
                "recent_messages": 6,
                "model_context_window": 512,
                "compaction_threshold": 0.5,
            },
        )
        self.retained_agent = agent_register(
            workspace=workspace, slug="forgetful", memory_settings={"retention_days": 1}
        )
        self.person = memory_user_create(workspace=workspace, canonical_id="ana@example.com")
        _, self.secret = api_key_create(workspace=workspace, name="scale-out")
        provider_credential_set(
            workspace=workspace,
            purpose="embedding",
            base_url=self.embeddings.url,
            model="scale-out-hash",
            api_key="test",
        )

    def _start(self, name: str, args: list[str], env: dict) -> None:
        process = Process(name, args, env, self.root)
        self.processes[name] = process
        self.addCleanup(process.stop)

    def _broker_use(self):
        """Point this process's Celery app at the test broker (as core/tests/test_worker.py does)."""
        previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
        self._pools_reset()
        app.conf.update(broker_url=self.valkey.url, task_always_eager=False)

        def restore():
            self._pools_reset()
            app.conf.update(**previous)

        self.addCleanup(restore)

    def _pools_reset(self):
        from kombu import pools

        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None
        app.amqp._producer_pool = None
        pools.reset()

    def _wait_until_started(self):
        def webs_up():
            for url in self.webs:
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code != 200:
                        return False
                except httpx.HTTPError:
                    return False
            return True

        def workers_up():
            names = set(WorkerHeartbeat.objects.values_list("worker", flat=True))
            return all(any(n.startswith(f"{w}@") for n in names) for w in ("worker-a", "worker-b"))

        for what, condition in (("webs", webs_up), ("workers", workers_up)):
            dead = [p.name for p in self.processes.values() if p.popen.poll() is not None]
            assert not dead, f"exited at start-up: {dead}\n{self._logs()}"
            assert _wait_for(condition, timeout=START_TIMEOUT, interval=0.5), f"{what} not up\n{self._logs()}"

    # --- helpers -------------------------------------------------------------------------

    def _logs(self) -> str:
        return "\n".join(
            f"===== {p.name} (pid {p.pid}) =====\n{p.output()[-4000:]}" for p in self.processes.values()
        )

    def _client(self, url: str) -> httpx.Client:
        client = httpx.Client(
            base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {self.secret}"}, timeout=30
        )
        self.addCleanup(client.close)
        return client

    def _worker_results(self) -> dict[str, str]:
        """Task id -> logged return value, from both workers' logs."""
        results = {}
        for name in ("worker-a", "worker-b"):
            for match in TASK_SUCCEEDED.finditer(self.processes[name].output()):
                results[match["id"]] = match["result"].strip()
        return results

    def _queues_drained(self) -> bool:
        """No message waits in the broker or runs unacknowledged (late acknowledgement) in a worker."""
        import redis

        client = redis.Redis(unix_socket_path=str(self.valkey.socket_path))
        try:
            for _ in range(3):
                if client.llen("celery") or client.hlen("unacked"):
                    return False
                time.sleep(0.1)
            return True
        finally:
            client.close()

    def _settle(self):
        assert _wait_for(self._queues_drained, timeout=SETTLE_TIMEOUT), f"tasks still queued\n{self._logs()}"

    def _both(self, pool, calls):
        """Run each (method, path, body) on both webs at once; returns [(response_a, response_b), ...]."""
        pairs = [
            (
                pool.submit(getattr(self.clients[0], m), p, **k),
                pool.submit(getattr(self.clients[1], m), p, **k),
            )
            for m, p, k in calls
        ]
        return [(a.result(), b.result()) for a, b in pairs]

    # --- the test ------------------------------------------------------------------------

    def test_every_effect_happens_once_across_two_webs_and_workers(self):
        self.clients = [self._client(url) for url in self.webs]
        started = time.monotonic()
        try:
            with ThreadPoolExecutor(max_workers=8) as pool:
                thread_id = self._check_idempotent_appends(pool)
                self._check_message_embeddings(thread_id)
                self._check_extraction(pool)
                self._check_compaction(pool)
            self._check_retention()
            self._check_beat_singleton()
        except BaseException:
            print(self._logs())
            raise
        print(f"scale-out test body: {time.monotonic() - started:.1f} s")

    def _thread_create(self, client: httpx.Client, agent_slug: str) -> str:
        response = client.post("/threads/", json={"agent": agent_slug, "memory_user": str(self.person.pk)})
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def _check_idempotent_appends(self, pool) -> str:
        """The same idempotency keys sent to both webs at once store one message per key."""
        thread_id = self._thread_create(self.clients[0], self.agent.slug)
        keys = [f"turn-{i}" for i in range(12)]
        calls = [
            (
                "post",
                f"/threads/{thread_id}/messages/",
                {
                    "json": {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": f"Note {i} about the trip.",
                        "idempotency_key": key,
                    }
                },
            )
            for i, key in enumerate(keys)
        ]
        first = self._both(pool, calls)
        ids = {}
        for key, (a, b) in zip(keys, first, strict=True):
            assert sorted([a.status_code, b.status_code]) == [200, 201], (key, a.text, b.text)
            (message_a,), (message_b,) = a.json()["messages"], b.json()["messages"]
            assert message_a["id"] == message_b["id"], key
            assert sorted([message_a["duplicate"], message_b["duplicate"]]) == [False, True]
            ids[key] = message_a["id"]
        stored = _rows(
            "SELECT idempotency_key, count(*), min(id::text) FROM threads_message"
            " WHERE thread_id = %s GROUP BY 1",
            [thread_id],
        )
        assert {key: (count, message_id) for key, count, message_id in stored} == {
            key: (1, message_id) for key, message_id in ids.items()
        }
        # Replays answer the stored message from either web.
        for key, (a, b) in zip(keys, self._both(pool, calls), strict=True):
            for response in (a, b):
                assert response.status_code == 200, response.text
                (message,) = response.json()["messages"]
                assert (message["id"], message["duplicate"]) == (ids[key], True)
        assert _rows("SELECT message_count FROM threads_thread WHERE id = %s", [thread_id]) == [(len(keys),)]
        return thread_id

    def _check_message_embeddings(self, thread_id: str):
        """Semantic recall embeds every message once, whichever worker ran the task."""
        expected = _rows(
            "SELECT count(*) FROM threads_message WHERE thread_id = %s AND role IN ('user', 'assistant')",
            [thread_id],
        )[0][0]

        def embedded():
            return (
                _rows("SELECT count(*) FROM episodes_messageembedding WHERE thread_id = %s", [thread_id])[0][
                    0
                ]
                >= expected
            )

        assert _wait_for(embedded, timeout=SETTLE_TIMEOUT), self._logs()
        self._settle()
        per_message = _rows(
            "SELECT m.id, count(e.id) FROM threads_message m"
            " LEFT JOIN episodes_messageembedding e ON e.message_id = m.id"
            " WHERE m.thread_id = %s GROUP BY m.id",
            [thread_id],
        )
        assert len(per_message) == expected
        assert {count for _, count in per_message} == {1}

    def _check_extraction(self, pool):
        """The same turn extracted through both webs at once stores each candidate once, with one vector.

        Each turn goes to both webs at the same moment, so its two tasks sit side by side in the
        queue and the two workers run them concurrently; a final replay of every turn stores nothing.
        """
        facts = [
            "I am allergic to peanuts.",
            "My daughter Maria starts school in Porto in September.",
            "I prefer aisle seats on long flights.",
            "My manager is called Joana Ribeiro.",
            "I run 10 km every Sunday morning.",
            "My car is a blue Renault from 2019.",
            "I am learning Japanese for a trip in April.",
            "My dentist appointment is on the 14th.",
        ]

        def turn(turn_facts):
            return {
                "agent": self.agent.slug,
                "memory_user": str(self.person.pk),
                "transcript": [{"role": "user", "content": fact} for fact in turn_facts],
                "candidates": [
                    {
                        "content": fact.replace("I am", "Ana is")
                        .replace("I ", "Ana ")
                        .replace("My", "Ana's"),
                        "source": "user_assertion",
                        "evidence": fact,
                    }
                    for fact in turn_facts
                ],
                "use_llm": False,
            }

        turns = [turn(facts[i : i + 2]) for i in range(0, len(facts), 2)]
        # A remote embedding endpoint answers in hundreds of milliseconds (the local model in
        # 50-800 ms): long enough for the two tasks of a turn to overlap as they do in production.
        self.embeddings.delay_seconds = 0.5
        self.addCleanup(setattr, self.embeddings, "delay_seconds", 0.0)
        # One turn at a time: its two tasks are next to each other in the queue, and the two
        # workers take them together.
        for body in [*turns, turn(facts)]:
            for a, b in self._both(pool, [("post", "/episodic-entries/extract/", {"json": body})]):
                assert (a.status_code, b.status_code) == (202, 202), (a.text, b.text)
        self._settle()
        self.embeddings.delay_seconds = 0.0
        entries = _rows(
            "SELECT content_hash, count(*) FROM episodes_episodicentry WHERE memory_user_id = %s GROUP BY 1",
            [self.person.pk],
        )
        assert len(entries) == len(facts), entries
        assert {count for _, count in entries} == {1}, f"an entry was stored twice: {entries}"
        vectors = _rows(
            "SELECT e.id, count(v.id) FROM episodes_episodicentry e"
            " LEFT JOIN episodes_entryembedding v ON v.entry_id = e.id"
            " WHERE e.memory_user_id = %s GROUP BY e.id",
            [self.person.pk],
        )
        assert {count for _, count in vectors} == {1}, vectors

    def _compactions(self) -> int:
        return sum(1 for result in self._worker_results().values() if result == "'compacted'")

    def _summary(self, thread_id: str):
        return _rows(
            "SELECT summary, summary_upto_id, compacted_at, compaction_requested_at, compaction_lease_until"
            " FROM threads_thread WHERE id = %s",
            [thread_id],
        )[0]

    def _check_compaction(self, pool):
        """Appends past the threshold and compaction requests from both webs summarise each message once."""
        thread_id = self._thread_create(self.clients[1], self.agent.slug)
        calls = [
            (
                "post",
                f"/threads/{thread_id}/messages/",
                {
                    "json": {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": f"Order {i} ships to Lisbon on day {i + 1} with {i * 7} boxes.",
                        "idempotency_key": f"order-{i}",
                    }
                },
            )
            for i in range(30)
        ]
        self._both(pool, calls)
        self._settle()
        # A compaction the appends queued has run (or they queued none yet if the claim was held).
        before = self._compactions()
        for a, b in self._both(pool, [("post", f"/threads/{thread_id}/compact/", {})]):
            assert (a.status_code, b.status_code) == (202, 202), (a.text, b.text)
        self._settle()
        summary, upto_id, compacted_at, requested_at, lease = self._summary(thread_id)
        assert upto_id is not None, self._logs()
        assert (requested_at, lease) == (None, None)
        # Two requests at once over a range the appends left: at most one summarises it.
        assert self._compactions() - before <= 1
        # Nothing new since: two more requests change nothing.
        before = self._compactions()
        self._both(pool, [("post", f"/threads/{thread_id}/compact/", {})])
        self._settle()
        assert self._compactions() == before
        assert self._summary(thread_id)[:3] == (summary, upto_id, compacted_at)
        # Each summarised message appears once, in order, and the recent tail not at all.
        messages = _rows(
            "SELECT content, seq <= (SELECT seq FROM threads_message WHERE id = %s)"
            " FROM threads_message WHERE thread_id = %s ORDER BY seq",
            [upto_id, thread_id],
        )
        markers = [(" ".join(content.split()[:3]), inside) for content, inside in messages]
        assert all(summary.count(marker) <= 1 for marker, _ in markers), summary
        positions = [summary.find(marker) for marker, inside in markers if inside and marker in summary]
        assert positions and positions == sorted(positions), summary
        tail = [marker for marker, inside in markers if not inside]
        assert len(tail) == self.agent.memory_settings["recent_messages"]
        assert not any(marker in summary for marker in tail), summary

    def _check_retention(self):
        """Two purge runs at once delete each expired thread once; their counts add up to the rows removed."""
        client = self.clients[0]
        expired = [self._thread_create(client, self.retained_agent.slug) for _ in range(4)]
        fresh = self._thread_create(client, self.retained_agent.slug)
        for thread_id in [*expired, fresh]:
            response = client.post(
                f"/threads/{thread_id}/messages/", json={"role": "user", "content": "Hello."}
            )
            assert response.status_code == 201, response.text
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE threads_thread SET last_activity_at = now() - interval '3 days'"
                " WHERE id = ANY(%s::uuid[])",
                [expired],
            )
        # Two runs of the retention engine for the workspace at once: one claims the
        # workspace, the other answers already_running or finds nothing left.
        sent = [
            app.send_task("retention.tasks.retention_run_task", args=[str(self.retained_agent.workspace_id)])
            for _ in range(2)
        ]
        ids = [result.id for result in sent]

        def both_done():
            results = self._worker_results()
            return all(task_id in results for task_id in ids) and results

        results = _wait_for(both_done, timeout=SETTLE_TIMEOUT)
        assert results, self._logs()
        returned = [ast.literal_eval(results[task_id]) for task_id in ids]
        assert sum(r.get("threads", 0) for r in returned if isinstance(r, dict)) == len(expired), returned
        remaining = _rows("SELECT id::text FROM threads_thread WHERE agent_id = %s", [self.retained_agent.pk])
        assert remaining == [(fresh,)]
        assert _rows("SELECT count(*) FROM threads_message WHERE thread_id = ANY(%s::uuid[])", [expired]) == [
            (0,)
        ]

    def _check_beat_singleton(self):
        """One beat sends; the other stands by and takes over within seconds of the holder's death."""
        beats = [self.processes["beat-a"], self.processes["beat-b"]]

        def sending():
            return [b for b in beats if "Sending due task" in b.output()]

        assert _wait_for(lambda: len(sending()) >= 1, timeout=30), self._logs()
        # A few periods of the one-second schedule: still one sender.
        assert not _wait_for(lambda: len(sending()) > 1, timeout=4), self._logs()
        (holder,) = sending()
        (standby,) = [b for b in beats if b is not holder]
        assert "another beat holds the beat lock" in standby.output(), self._logs()
        assert holder.output().count("Sending due task") >= 3
        holder.kill()
        killed_at = time.monotonic()
        assert _wait_for(lambda: "Sending due task" in standby.output(), timeout=20), self._logs()
        print(f"standby beat sent {time.monotonic() - killed_at:.1f} s after the holder was killed")


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie has exited: nothing may reap an orphan here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_process_stop_leaves_none_of_its_children_running(tmp_path):
    """A server's own children (gunicorn's workers, a fork of a worker) go with it. A fork of a
    worker had stayed running, hung, an hour after the suite (2026-12-05)."""
    child_pid = tmp_path / "child.pid"
    process = Process(
        "parent",
        ["sh", "-c", f"sleep 600 & echo $! > {child_pid}; wait"],
        dict(os.environ),
        tmp_path,
    )
    try:
        assert _wait_for(lambda: child_pid.exists() and child_pid.read_text().strip(), timeout=10)
        pid = int(child_pid.read_text())
        assert _running(pid)
        process.stop()
        assert _wait_for(lambda: not _running(pid), timeout=5), f"{pid} still runs"
    finally:
        if child_pid.exists() and _running(int(child_pid.read_text())):
            os.kill(int(child_pid.read_text()), signal.SIGKILL)
