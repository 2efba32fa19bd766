"""Load: concurrent simulated agents against `manage.py serve` over HTTP (issue 11, "Load").

    python -m bench.load_agents                                   # its own serve, 50 agents, 300 s
    python -m bench.load_agents --agents 20 --duration 60 --json OUT
    python -m bench.load_agents --url http://127.0.0.1:8000 --key mem_...   # a running server

Without `--url` it starts `manage.py serve --no-demo --mcp-port 0` on a free port with its
own `MEMORY_VAR_DIR` under var/ (embedded PostgreSQL and Valkey, Celery worker and beat,
gunicorn; DEBUG off), provisions a workspace with one agent-bound key per agent and a few
procedures through `manage.py shell`, and stops serve by its process id at the end (then
its remaining descendants by theirs, if it did not stop them); the var directory is removed
unless `--keep-var`. With `--url` every agent uses `--key` (a writable workspace-wide key;
agents are registered by slug on first use); the per-key throttle (`API_THROTTLE_RATE`,
6000/min) then applies to all of them together.

Each agent is one thread with its own HTTP connection, its own person (channel identity)
and its own conversation, and repeats a turn until the deadline:

1. `context`: POST /api/v1/context/ with the user's message and `append: true` (the first
   turn names the person by channel identity and chat id; later ones by ids);
2. `append`: POST /threads/{id}/messages/ with the assistant's reply;
3. `history`: GET /threads/{id}/history/ (a window read, as frameworks that keep their own
   prompt do);
4. every 3rd turn `remember` (POST /facts/remember/, user scope, one of 12 keys, so values
   confirm and supersede); every 2nd turn `recall` (POST /recall/, by key or by query
   alternately) and `search` (POST /episodic-entries/search/); every 5th turn `extract`
   (POST /episodic-entries/extract/, asynchronous, with a candidate quoting the user, so
   the worker embeds and stores entries that later searches find).

then waits `--think-ms` (uniform 0.5x-1.5x; its model's turn) before the next. Every loop
stops at the deadline; a request in flight then finishes or times out (`--timeout`).
Reported per operation: count, errors (any non-2xx or exception, with the first bodies),
p50/p95/p99 latency as the client saw it, throughput; plus the machine's cores and load
average before and after, the CPU seconds serve's processes (web, worker, PostgreSQL, ...)
spent during the run, which say what the load cost whatever else shared the machine, and
the worker's task backlog at the deadline and how long it took to drain.

An agent keeps its connection across its pause the way httpx does by default (idle
connections kept `--keepalive-expiry`, 5 s). With gunicorn's default keep-alive of 2 s,
requests sent on a connection the server was closing came back reset under saturation (1
and 11 `context` requests in two 300 s runs, none logged by gunicorn); `serve` now keeps
idle connections 30 s (`--keep-alive`), and the same run had 0 errors in 18,069 requests.
This is a benchmark, not a test: it is not run by CI.
"""

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.harness import summarize, write_json

BASE_DIR = Path(__file__).resolve().parent.parent
ERROR_SAMPLES = 5
WARM_UP_ROUNDS = 6
WARM_UP_FAST_SECONDS = 2.0

CITIES = ("Lisbon", "Porto", "Berlin", "Madrid", "Rome", "Lyon", "Oslo", "Vienna", "Prague", "Dublin")
THINGS = ("a flight", "a hotel room", "a dentist appointment", "a piano lesson", "a train ticket")
THINGS += ("a table for two", "a bicycle repair", "a birthday cake", "a plumber", "a team meeting")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
FACT_KEYS = tuple(
    f"{k}_preference"
    for k in ("seat", "meal", "hotel", "airline", "language", "currency", "city", "music")
    + ("coffee", "tea", "sport", "newsletter")
)
PROCEDURES = (
    ("Booking policy", ["book", "flight"], "Confirm dates and the seat preference before booking."),
    ("Refund policy", ["refund"], "Check the order date; refunds within 30 days only."),
    ("Appointment rules", ["appointment"], "Offer two slots and confirm by message."),
    ("Travel checklist", ["train", "hotel"], "Check the passport, tickets and the hotel address."),
    ("Team meetings", ["meeting"], "Send an agenda one day before the meeting."),
)

PROVISION = """
import json
from core.services import agent_get_or_create, api_key_create, workspace_create
from procedures.services import procedure_create

workspace = workspace_create(name={name!r})
keys = []
for index in range({agents}):
    agent = agent_get_or_create(workspace=workspace, slug=f"bench-agent-{{index:02d}}")
    keys.append(api_key_create(workspace=workspace, agent=agent, name=f"bench {{index}}")[1])
for name, words, content in {procedures!r}:
    procedure_create(
        workspace=workspace,
        name=name,
        procedure_type="prompt_template",
        content=content,
        trigger_conditions={{"goal_contains": words}},
    )
print("BENCH-KEYS " + json.dumps(keys))
"""


class Stats:
    """Latencies and failures per operation, shared by the agent threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = {}
        self.errors: Counter = Counter()
        self.statuses: dict[str, Counter] = {}
        self.samples: dict[str, list[dict]] = {}
        self.turns = 0

    def record(self, op: str, ms: float, status: int | None, error: str | None) -> None:
        with self.lock:
            self.latencies.setdefault(op, []).append(ms)
            self.statuses.setdefault(op, Counter())[str(status) if status else "exception"] += 1
            if error is not None:
                self.errors[op] += 1
                samples = self.samples.setdefault(op, [])
                if len(samples) < ERROR_SAMPLES:
                    samples.append({"status": status, "body": error[:500]})

    def turn_done(self) -> None:
        with self.lock:
            self.turns += 1


class SimulatedAgent(threading.Thread):
    def __init__(self, *, index: int, url: str, key: str, slug: str | None, args, stats: Stats, deadline):
        super().__init__(name=f"agent-{index:02d}", daemon=True)
        self.index, self.url, self.key, self.slug = index, url, key, slug
        self.args, self.stats, self.deadline = args, stats, deadline
        self.rng = random.Random(args.seed * 1000 + index)
        self.run_id = f"{args.seed}-{int(time.time())}"
        self.memory_user = None
        self.thread = None

    def call(self, op: str, method: str, path: str, client: httpx.Client, **kwargs):
        """The response JSON of a 2xx answer, else None; every call is recorded."""
        started = time.perf_counter()
        try:
            response = client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            ms = (time.perf_counter() - started) * 1000
            self.stats.record(op, ms, None, f"{type(exc).__name__}: {exc}")
            return None
        ms = (time.perf_counter() - started) * 1000
        ok = 200 <= response.status_code < 300
        self.stats.record(op, ms, response.status_code, None if ok else response.text)
        if not ok:
            return None
        try:
            return response.json()
        except ValueError:
            return {}

    def body(self, **fields) -> dict:
        if self.slug:
            fields["agent"] = self.slug
        return fields

    def user_message(self) -> str:
        rng = self.rng
        verb = rng.choice(("I need", "Please book", "Can you find", "I want to cancel", "Remind me about"))
        return f"{verb} {rng.choice(THINGS)} in {rng.choice(CITIES)} on {rng.choice(DAYS)}."

    def turn(self, client: httpx.Client, number: int) -> None:
        rng = self.rng
        message = self.user_message()
        ids = {"memory_user": self.memory_user, "thread": self.thread}
        if self.thread is None:
            ids = {
                "channel": "bench",
                "external_id": f"person-{self.index}",
                "channel_chat_id": f"c{self.index}",
            }
        context = self.call(
            "context",
            "POST",
            "/api/v1/context/",
            client,
            json=self.body(
                **ids,
                message=message,
                append=True,
                idempotency_key=f"{self.run_id}-{self.index}-{number}",
                token_budget=4000,
            ),
        )
        if context is None:
            return
        self.thread = context["thread"]
        self.memory_user = context["memory_user"]["id"]
        if not self._running():
            return
        reply = f"Done: {message.lower().rstrip('.')} is arranged. Anything else?"
        self.call(
            "append",
            "POST",
            f"/api/v1/threads/{self.thread}/messages/",
            client,
            json={"messages": [{"role": "assistant", "content": reply}]},
        )
        if self._running():
            self.call("history", "GET", f"/api/v1/threads/{self.thread}/history/", client)
        person = {"memory_user": self.memory_user}
        if number % 3 == 0 and self._running():
            self.call(
                "remember",
                "POST",
                "/api/v1/facts/remember/",
                client,
                json=self.body(
                    **person,
                    key=rng.choice(FACT_KEYS),
                    value=rng.choice(CITIES),
                    scope="user",
                    fact_type="user_preference",
                ),
            )
        if number % 2 == 0 and self._running():
            lookup = {"key": rng.choice(FACT_KEYS)} if number % 4 == 0 else {"query": rng.choice(CITIES)}
            self.call("recall", "POST", "/api/v1/recall/", client, json=self.body(**person, **lookup))
        if number % 2 == 0 and self._running():
            self.call(
                "search",
                "POST",
                "/api/v1/episodic-entries/search/",
                client,
                json=self.body(**person, query=message, top_k=5),
            )
        if number % 5 == 0 and self._running():
            candidate = {"content": f"Asked: {message}", "source": "user_assertion", "evidence": message}
            self.call(
                "extract",
                "POST",
                "/api/v1/episodic-entries/extract/",
                client,
                json=self.body(**person, thread=self.thread, candidates=[candidate], use_llm=False),
            )
        self.stats.turn_done()

    def _running(self) -> bool:
        return time.monotonic() < self.deadline

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        # Kept across the pause, as an agent's client does (module docstring).
        limits = httpx.Limits(keepalive_expiry=self.args.keepalive_expiry)
        options = {"headers": headers, "timeout": self.args.timeout, "limits": limits}
        with httpx.Client(base_url=self.url, **options) as client:
            number = 0
            while self._running():
                number += 1
                self.turn(client, number)
                pause = self.args.think_ms / 1000 * self.rng.uniform(0.5, 1.5)
                time.sleep(max(0.0, min(pause, self.deadline - time.monotonic())))


class Serve:
    """`manage.py serve` in its own var directory, stopped by process id."""

    def __init__(self, args):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.var_dir = BASE_DIR / "var" / f"bench-load-{stamp}-{os.getpid()}"
        self.log_path = BASE_DIR / "var" / f"bench-load-{stamp}-{os.getpid()}.log"
        self.args = args
        self.port = args.port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "DJANGO_DEBUG")
        }
        self.env.update(
            MEMORY_VAR_DIR=str(self.var_dir),
            DJANGO_SETTINGS_MODULE="memory_project.settings.development",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )

    def start(self) -> None:
        self.var_dir.mkdir(parents=True)
        log = open(self.log_path, "w")  # noqa: SIM115 - closed with the process
        command = [
            sys.executable,
            str(BASE_DIR / "manage.py"),
            "serve",
            "--no-demo",
            "--host=127.0.0.1",
            f"--port={self.port}",
            "--mcp-port=0",
            f"--web-workers={self.args.web_workers}",
        ]
        self.process = subprocess.Popen(
            command, cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + self.args.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited with {self.process.returncode}; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(
            f"serve did not answer /healthz within {self.args.startup_timeout} s; see {self.log_path}"
        )

    def provision(self, agents: int) -> list[str]:
        code = PROVISION.format(
            name=f"bench-load-{os.getpid()}-{int(time.time())}", agents=agents, procedures=PROCEDURES
        )
        result = subprocess.run(
            [sys.executable, str(BASE_DIR / "manage.py"), "shell", "-c", code],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        for line in result.stdout.splitlines():
            if line.startswith("BENCH-KEYS "):
                return json.loads(line[len("BENCH-KEYS ") :])
        raise RuntimeError(f"provisioning failed ({result.returncode}): {result.stderr[-2000:]}")

    def stop(self) -> None:
        if self.process is None:
            return
        descendants = _descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # serve stops its children itself; one it left behind is stopped by its own id.
        for pid in descendants:
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
        time.sleep(1)
        left = [pid for pid in descendants if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if left:
            print(f"killed processes serve left behind: {left}")
        if not self.args.keep_var:
            shutil.rmtree(self.var_dir, ignore_errors=True)

    def drain(self, timeout: float) -> dict:
        """Tasks waiting in the broker when the load stopped (the worker's backlog: message and
        fact embeddings, extractions), and how long the worker then took to empty the queue."""
        import redis

        broker = redis.Redis(unix_socket_path=str(self.var_dir / "valkey" / "valkey.sock"))

        def waiting() -> int:
            # Queued, plus taken by the worker and not yet acknowledged (late acknowledgement).
            return broker.llen("celery") + broker.hlen("unacked")

        try:
            backlog = left = waiting()
            started = time.monotonic()
            while left and time.monotonic() - started < timeout:
                time.sleep(1)
                left = waiting()
            return {
                "backlog_at_deadline": backlog,
                "left_after_drain": left,
                "drain_s": round(time.monotonic() - started, 1),
            }
        except redis.RedisError as exc:
            return {"error": str(exc)}
        finally:
            broker.close()

    def log_problems(self) -> dict:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return {
            "log": str(self.log_path),
            "tracebacks": text.count("Traceback (most recent call last)"),
            "error_lines": sum(1 for line in text.splitlines() if " ERROR " in line or "[ERROR]" in line),
            "worker_timeouts": text.count("WORKER TIMEOUT"),
        }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after the last ")" are fixed.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    return children


def _descendants(pid: int) -> list[int]:
    children, found, stack = _children_map(), [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _own_cpu() -> float:
    usage = os.times()
    return usage.user + usage.system


def _role(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    for needle, role in (("gunicorn", "web"), (" worker", "worker"), (" beat", "beat")):
        if needle in command:
            return role
    for needle in ("postgres", "valkey"):
        if needle in command:
            return needle
    return "other"


def _postmasters(var_dir: Path) -> list[int]:
    """The embedded PostgreSQL of `var_dir`: pg_ctl detaches it, so it is not serve's child."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command and command[0].endswith(b"/postgres") and f"{var_dir}/".encode() in b" ".join(command):
            found.append(int(entry))
    return found


def _cpu_by_role(pid: int, var_dir: Path | None = None) -> dict[str, float]:
    """CPU seconds (user + system) of serve's process tree by role (web, worker, beat, valkey)
    and of its embedded PostgreSQL. A process that exits during the run takes its seconds
    with it."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    postgres = [p for root in (_postmasters(var_dir) if var_dir else []) for p in (root, *_descendants(root))]
    for child in [pid, *_descendants(pid), *postgres]:
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime and stime are fields 14 and 15 of stat; 12 and 13 after the command name.
        seconds = (int(fields[11]) + int(fields[12])) / ticks
        role = "serve" if child == pid else "postgres" if child in postgres else _role(child)
        totals[role] = totals.get(role, 0.0) + seconds
    return totals


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def warm_up(*, url: str, key: str, slug: str | None, args) -> list[float]:
    """Concurrent context calls until a round is fast: each web process loads the embedding
    model on its first query (tens of seconds on a busy machine), which is start-up, not load.
    Returns each round's slowest call in seconds."""
    body = {"channel": "bench", "external_id": "warm-up", "message": "Book a flight to Lisbon on Friday."}
    if slug:
        body["agent"] = slug
    rounds = []

    def one(client, slowest):
        started = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):
            client.post("/api/v1/context/", json=body)
        slowest.append(time.perf_counter() - started)

    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=args.startup_timeout) as client:
        for _ in range(WARM_UP_ROUNDS):
            slowest: list[float] = []
            callers = [
                threading.Thread(target=one, args=(client, slowest)) for _ in range(4 * args.web_workers)
            ]
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join()
            rounds.append(round(max(slowest), 2))
            if rounds[-1] < WARM_UP_FAST_SECONDS:
                break
    return rounds


def run_agents(
    *, url: str, keys: list[str], slugs: list[str | None], args, serve_pid: int | None, var_dir: Path | None
) -> dict:
    warm_up_rounds = warm_up(url=url, key=keys[0], slug=slugs[0], args=args)
    print(f"warm-up rounds, slowest call (s): {warm_up_rounds}")
    stats = Stats()
    load_before = os.getloadavg()
    cpu_before = _cpu_by_role(serve_pid, var_dir) if serve_pid else {}
    client_before = _own_cpu()
    started = time.monotonic()
    deadline = started + args.duration
    agents = [
        SimulatedAgent(
            index=i, url=url, key=keys[i], slug=slugs[i], args=args, stats=stats, deadline=deadline
        )
        for i in range(args.agents)
    ]
    # Agents arrive over the ramp, as conversations do, rather than in one burst.
    for agent in agents:
        agent.start()
        time.sleep(min(args.ramp, max(0.0, deadline - time.monotonic())) / max(1, args.agents))
    for agent in agents:
        agent.join(timeout=max(0.0, deadline - time.monotonic()) + args.timeout + 5)
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    client_cpu = _own_cpu() - client_before
    server_cpu = {}
    if serve_pid:
        cpu_after = _cpu_by_role(serve_pid, var_dir)
        server_cpu = {
            role: round(cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0), 1)
            for role in sorted(set(cpu_after) | set(cpu_before))
        }
    operations = {}
    for op, samples in sorted(stats.latencies.items()):
        operations[op] = {
            **summarize(samples),
            "errors": stats.errors[op],
            "statuses": dict(stats.statuses[op]),
            "error_samples": stats.samples.get(op, []),
            "per_second": round(len(samples) / elapsed, 2),
        }
    total = sum(len(s) for s in stats.latencies.values())
    return {
        "elapsed_s": round(elapsed, 1),
        "turns": stats.turns,
        "requests": total,
        "errors": sum(stats.errors.values()),
        "requests_per_second": round(total / elapsed, 2),
        "turns_per_second": round(stats.turns / elapsed, 2),
        "operations": operations,
        "stragglers": sum(1 for agent in agents if agent.is_alive()),
        "warm_up_rounds_s": warm_up_rounds,
        # CPU seconds used during the run: what the load cost, whatever else shared the machine.
        "cpu_seconds": {
            "server": server_cpu,
            "server_per_request_ms": (
                round(sum(server_cpu.values()) / total * 1000, 1) if server_cpu and total else None
            ),
            "client": round(client_cpu, 1),
        },
        "machine": {
            "cores": os.cpu_count(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after],
        },
    }


def print_report(result: dict) -> None:
    print(
        f"\n{'operation':<10} {'n':>7} {'errors':>7} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'req/s':>8}"
    )
    for op, row in result["operations"].items():
        print(
            f"{op:<10} {row['n']:>7} {row['errors']:>7} {row['p50_ms']:>9.1f} {row['p95_ms']:>9.1f} "
            f"{row['p99_ms']:>9.1f} {row['per_second']:>8.2f}"
        )
    machine = result["machine"]
    print(
        f"\n{result['requests']} requests, {result['errors']} errors, {result['turns']} turns in "
        f"{result['elapsed_s']} s: {result['requests_per_second']} req/s, "
        f"{result['turns_per_second']} turns/s"
    )
    print(
        f"cores {machine['cores']}, load average before {machine['load_before']}, "
        f"after {machine['load_after']}"
    )
    cpu = result["cpu_seconds"]
    if cpu["server"]:
        print(f"server CPU seconds {cpu['server']} = {cpu['server_per_request_ms']} ms per request")
    if "task_queue" in result:
        print(f"worker queue: {result['task_queue']}")
    print(f"client CPU seconds {cpu['client']}")
    for op, row in result["operations"].items():
        for sample in row["error_samples"]:
            print(f"  {op} error: {sample['status']} {sample['body'][:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--duration", type=float, default=300, help="Seconds of load.")
    parser.add_argument("--think-ms", type=float, default=1000, help="Mean pause between an agent's turns.")
    parser.add_argument("--ramp", type=float, default=10, help="Seconds over which the agents start.")
    parser.add_argument("--timeout", type=float, default=60, help="Seconds a request may take.")
    parser.add_argument(
        "--keepalive-expiry", type=float, default=5.0, help="Seconds an idle connection is kept for reuse."
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--url", help="A running server (with --key) instead of starting serve.")
    parser.add_argument("--key", help="A writable workspace-wide API key of --url.")
    parser.add_argument(
        "--port", type=int, default=0, help="Port for the serve it starts (default: a free one)."
    )
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn workers of the serve it starts.")
    parser.add_argument("--startup-timeout", type=float, default=300)
    parser.add_argument("--keep-var", action="store_true", help="Keep the serve's var directory.")
    parser.add_argument(
        "--drain-timeout", type=float, default=300, help="Seconds to wait for the worker backlog."
    )
    parser.add_argument("--json", help="Write the figures here.")
    args = parser.parse_args()
    if bool(args.url) != bool(args.key):
        parser.error("--url and --key go together.")

    serve = None
    config = {k: v for k, v in vars(args).items() if k not in ("key", "json")}
    try:
        if args.url:
            url = args.url.rstrip("/")
            keys = [args.key] * args.agents
            slugs = [f"bench-agent-{i:02d}" for i in range(args.agents)]
        else:
            serve = Serve(args)
            print(f"starting serve on {serve.url} (var: {serve.var_dir}, log: {serve.log_path})")
            serve.start()
            keys = serve.provision(args.agents)
            url, slugs = serve.url, [None] * args.agents
        print(f"{args.agents} agents for {args.duration:.0f} s against {url}")
        serve_pid = serve.process.pid if serve is not None else None
        var_dir = serve.var_dir if serve is not None else None
        result = run_agents(url=url, keys=keys, slugs=slugs, args=args, serve_pid=serve_pid, var_dir=var_dir)
        if serve is not None:
            result["readyz"] = _readyz(url)
            result["task_queue"] = serve.drain(args.drain_timeout)
    finally:
        if serve is not None:
            serve.stop()
    if serve is not None:
        result["serve"] = serve.log_problems()
    result["config"] = config
    print_report(result)
    if serve is not None:
        print(f"serve log: {result['serve']}")
    write_json(args.json, result)


def _readyz(url: str) -> dict:
    try:
        response = httpx.get(f"{url}/readyz", timeout=10)
        return {"status": response.status_code, "body": response.json()}
    except (httpx.HTTPError, ValueError) as exc:
        return {"status": None, "body": str(exc)}


if __name__ == "__main__":
    main()
