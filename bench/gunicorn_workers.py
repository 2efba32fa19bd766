"""Gunicorn workers, threads and worker class chosen by measurement (issue 12; docs/deploy.md).

    python -m bench.gunicorn_workers                    # 7 configurations x 2 rounds, 30 s each
    python -m bench.gunicorn_workers --configs sync:1,sync:2,gthread:2x4 --duration 60 --rounds 1

Starts a throwaway embedded PostgreSQL (default durability settings, unlike the test
server) and a throwaway Valkey as broker and cache, migrates, provisions one workspace with
one agent-bound key per client (bench.load_agents' PROVISION), and seeds through the API:
per client a person, a 200-message thread, 12 facts and 20 episodic entries, then runs a
Celery worker until the queue is empty so entries, facts and messages have their vectors.

Then, for each configuration (`sync:W` or `gthread:WxT`), starts
`gunicorn memory_project.wsgi:application` with it and serve's hooks (memory_project/
gunicorn.conf.py: each worker warms up as it starts), warms every worker up (each loads the
embedding model on its first query), and runs a closed-loop load from this process (not
the server's): `--clients` threads, each with its own connection and key, no pause, each
picking from the mix append 1/3, history window 1/3, episodic search 1/6, fact recall 1/6
(the proportions of a bench.load_agents turn, without context assembly and extraction).
Enqueued tasks wait in the broker: no worker runs during a measurement, as in a deployment
whose workers have cores of their own. Reported per configuration: requests/s, p50/p95
overall and per operation, errors, CPU seconds of gunicorn and of PostgreSQL per request,
the gunicorn processes' resident memory, the load average before and after; and each
configuration's throughput as a ratio of the first one's in the same run. With `--rounds 2`
the second round runs the configurations in reverse order, so a drift of the shared machine
shows as a difference between rounds instead of a false ratio.

Everything started here is stopped by its process id. This is a benchmark, not a test.
"""

import argparse
import atexit
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.harness import percentile, summarize, write_json
from bench.load_agents import (
    CITIES,
    DAYS,
    FACT_KEYS,
    PROCEDURES,
    PROVISION,
    THINGS,
    _alive,
    _descendants,
    _free_port,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_CONFIGS = "sync:1,sync:2,sync:3,sync:4,gthread:2x2,gthread:2x4,gthread:4x2"
# One cycle of a bench.load_agents turn without context and extraction.
MIX = ("append", "history", "append", "history", "search", "recall")
SEED_MESSAGES = 200
SEED_ENTRIES = 20
WARM_UP_FAST_SECONDS = 2.0


class Config:
    def __init__(self, text: str):
        kind, _, size = text.partition(":")
        if kind not in ("sync", "gthread"):
            raise argparse.ArgumentTypeError(f"{text!r}: sync:W or gthread:WxT")
        workers, _, threads = size.partition("x")
        self.kind = kind
        self.workers = int(workers)
        self.threads = int(threads or 1)
        if kind == "sync" and self.threads != 1:
            raise argparse.ArgumentTypeError(f"{text!r}: a sync worker has one thread")

    @property
    def name(self) -> str:
        return f"sync:{self.workers}" if self.kind == "sync" else f"gthread:{self.workers}x{self.threads}"

    def gunicorn_args(self) -> list[str]:
        args = [f"--workers={self.workers}", f"--worker-class={self.kind}"]
        if self.kind == "gthread":
            args.append(f"--threads={self.threads}")
        return args


class Servers:
    """The throwaway PostgreSQL and Valkey, and the environment every child process gets."""

    def __init__(self, root: Path):
        from core.lib.embedded import EmbeddedValkey, postgres_server

        self.root = root
        # `kill PID` ends a run as Ctrl-C does, so the caller's `finally` and the exit handlers
        # stop what it started; Python's default for SIGTERM ends at once and leaves them running.
        signal.signal(signal.SIGTERM, _exit_on_signal)
        # As serve starts it (sized for the machine); cleanup_mode="delete": stopped and
        # removed when this process exits.
        self.postgres = postgres_server(root / "pgdata", cleanup_mode="delete")
        self.valkey = EmbeddedValkey(root / "valkey", root / "valkey" / "valkey.sock")
        self.valkey.start()
        socket_path = self.valkey.socket_path
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "DJANGO_DEBUG")
        }
        self.env.update(
            DJANGO_SETTINGS_MODULE="memory_project.settings.development",
            DATABASE_URL=self.postgres.get_uri(database="postgres"),
            CELERY_BROKER_URL=self.valkey.url,
            CACHE_URL=f"unix://{socket_path}?db=1",
            MEMORY_VAR_DIR=str(root / "var"),
            # One key per client; the per-key rate limit is not what is measured.
            API_THROTTLE_RATE="100000000/min",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )

    def manage(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run(
            [sys.executable, str(BASE_DIR / "manage.py"), *args],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {args[0]} failed: {result.stderr[-2000:]}")
        return result.stdout

    def queue_length(self) -> int:
        import redis

        broker = redis.Redis(unix_socket_path=str(self.valkey.socket_path))
        try:
            # Waiting, plus delivered and not yet acknowledged (late acknowledgement).
            return broker.llen("celery") + broker.hlen("unacked")
        finally:
            broker.close()

    def postgres_pids(self) -> list[int]:
        try:
            root = int((self.root / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [root, *_descendants(root)]

    def stop(self) -> None:
        self.valkey.stop()


class Gunicorn:
    """One gunicorn master with its workers, on a free port, stopped by its process id."""

    def __init__(self, servers: Servers, config: Config, log_path: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # serve's and the image's hooks: each worker warms up in a background thread as it
        # starts, then freezes the collector's generations (memory_project/gunicorn.conf.py).
        hooks = BASE_DIR / "memory_project" / "gunicorn.conf.py"
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "memory_project.wsgi:application",
            f"--bind=127.0.0.1:{self.port}",
            *config.gunicorn_args(),
            *([f"--config={hooks}"] if hooks.exists() else []),
            # As serve runs it: agents' clients keep idle connections for seconds.
            "--keep-alive=30",
            "--graceful-timeout=10",
            "--timeout=120",
            "--no-control-socket",
        ]
        self.log = open(log_path, "a")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command, cwd=BASE_DIR, env=servers.env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"gunicorn did not answer /healthz within {timeout} s")

    def pids(self) -> list[int]:
        return [self.process.pid, *_descendants(self.process.pid)]

    def stop(self) -> None:
        workers = _descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.log.close()


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime and stime: fields 14 and 15 of stat, 12 and 13 after the command name.
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


class Client:
    """One load-generator connection: its key, its person, its thread."""

    def __init__(self, *, index: int, url: str, key: str, timeout: float):
        self.index = index
        self.key = key
        self.rng = random.Random(1000 + index)
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)
        self.memory_user = None
        self.thread = None

    def rebase(self, url: str) -> None:
        self.http.close()
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {self.key}"}, timeout=self.http.timeout
        )

    def message(self) -> str:
        rng = self.rng
        verb = rng.choice(("I need", "Please book", "Can you find", "I want to cancel", "Remind me about"))
        return f"{verb} {rng.choice(THINGS)} in {rng.choice(CITIES)} on {rng.choice(DAYS)}."

    def request(self, op: str) -> httpx.Request:
        """The request of one operation of the mix."""
        person = {"memory_user": self.memory_user}
        if op == "append":
            body = {"messages": [{"role": "user", "content": self.message()}]}
            return self.http.build_request("POST", f"/api/v1/threads/{self.thread}/messages/", json=body)
        if op == "history":
            return self.http.build_request("GET", f"/api/v1/threads/{self.thread}/history/")
        if op == "search":
            body = {**person, "query": self.message(), "top_k": 5}
            return self.http.build_request("POST", "/api/v1/episodic-entries/search/", json=body)
        lookup = (
            {"key": self.rng.choice(FACT_KEYS)}
            if self.rng.random() < 0.5
            else {"query": self.rng.choice(CITIES)}
        )
        return self.http.build_request("POST", "/api/v1/recall/", json={**person, **lookup})

    def seed(self) -> None:
        def ok(response: httpx.Response) -> dict:
            if not 200 <= response.status_code < 300:
                raise RuntimeError(f"seeding: {response.status_code} {response.text[:500]}")
            return response.json()

        context = ok(
            self.http.post(
                "/api/v1/context/",
                json={
                    "channel": "bench",
                    "external_id": f"person-{self.index}",
                    "channel_chat_id": f"c{self.index}",
                    "message": self.message(),
                    "append": True,
                },
            )
        )
        self.thread = context["thread"]
        self.memory_user = context["memory_user"]["id"]
        for _ in range(SEED_MESSAGES // 50):
            messages = [{"role": role, "content": self.message()} for role in ("user", "assistant") * 25]
            ok(self.http.post(f"/api/v1/threads/{self.thread}/messages/", json={"messages": messages}))
        for key in FACT_KEYS:
            body = {
                "memory_user": self.memory_user,
                "key": key,
                "value": self.rng.choice(CITIES),
                "scope": "user",
                "fact_type": "user_preference",
            }
            ok(self.http.post("/api/v1/facts/remember/", json=body))
        for _ in range(SEED_ENTRIES // 5):
            candidates = []
            for _ in range(5):
                said = self.message()
                candidates.append({"content": f"Asked: {said}", "source": "user_assertion", "evidence": said})
            body = {
                "memory_user": self.memory_user,
                "thread": self.thread,
                "candidates": candidates,
                "use_llm": False,
            }
            ok(self.http.post("/api/v1/episodic-entries/extract/", json=body))


def seed(servers: Servers, clients: list[Client], log_path: Path, args) -> dict:
    """Seed through a gthread gunicorn, then let a Celery worker work off the queue."""
    started = time.monotonic()
    server = Gunicorn(servers, Config("gthread:2x4"), log_path)
    try:
        server.wait_healthy(args.startup_timeout)
        for client in clients:
            client.rebase(server.url)
            client.seed()
    finally:
        server.stop()
    worker_log = open(log_path, "a")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "memory_project",
            "worker",
            "--concurrency=2",
            "--pool=prefork",
        ],
        cwd=BASE_DIR,
        env={**servers.env, "EMBEDDING_TORCH_THREADS": "2"},
        stdout=worker_log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + args.drain_timeout
        empty_since = None
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise RuntimeError(f"the Celery worker exited with {worker.returncode}; see {log_path}")
            if servers.queue_length() == 0:
                empty_since = empty_since or time.monotonic()
                # Extraction tasks enqueue embedding tasks: empty twice in a row means done.
                if time.monotonic() - empty_since > 5:
                    break
            else:
                empty_since = None
            time.sleep(1)
        left = servers.queue_length()
    finally:
        children = _descendants(worker.pid)
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        worker_log.close()
    return {"seconds": round(time.monotonic() - started, 1), "tasks_left": left}


def warm_up(url: str, clients: list[Client], config: Config, timeout: float) -> list[float]:
    """Concurrent searches until a round is fast: the first query of each worker process
    loads the embedding model, which is start-up, not load. Each round's slowest, seconds."""
    rounds = []
    for _ in range(8):
        slowest: list[float] = []

        def one(client: Client, slowest: list[float]) -> None:
            started = time.perf_counter()
            try:
                with httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {client.key}"}, timeout=timeout
                ) as http:
                    http.post(
                        "/api/v1/episodic-entries/search/",
                        json={"memory_user": client.memory_user, "query": "a flight to Lisbon"},
                    )
            except httpx.HTTPError:
                pass
            slowest.append(time.perf_counter() - started)

        callers = [
            threading.Thread(target=one, args=(clients[i % len(clients)], slowest))
            for i in range(3 * config.workers * config.threads)
        ]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        rounds.append(round(max(slowest), 2))
        if rounds[-1] < WARM_UP_FAST_SECONDS:
            break
    return rounds


def measure(servers: Servers, config: Config, clients: list[Client], log_path: Path, args) -> dict:
    server = Gunicorn(servers, config, log_path)
    try:
        server.wait_healthy(args.startup_timeout)
        warm_up_rounds = warm_up(server.url, clients, config, args.startup_timeout)
        for client in clients:
            client.rebase(server.url)
        lock = threading.Lock()
        latencies: dict[str, list[float]] = {op: [] for op in sorted(set(MIX))}
        errors: Counter = Counter()
        error_samples: list[str] = []
        deadline = time.monotonic() + args.duration

        def loop(client: Client) -> None:
            while time.monotonic() < deadline:
                op = client.rng.choice(MIX)
                request = client.request(op)
                started = time.perf_counter()
                try:
                    response = client.http.send(request)
                    failed = (
                        None
                        if 200 <= response.status_code < 300
                        else f"{response.status_code} {response.text}"
                    )
                except httpx.HTTPError as exc:
                    failed = f"{type(exc).__name__}: {exc}"
                ms = (time.perf_counter() - started) * 1000
                with lock:
                    latencies[op].append(ms)
                    if failed:
                        errors[op] += 1
                        if len(error_samples) < 5:
                            error_samples.append(f"{op}: {failed[:300]}")

        load_before = os.getloadavg()
        gunicorn_pids, postgres_pids = server.pids(), servers.postgres_pids()
        gunicorn_cpu, postgres_cpu = _cpu_seconds(gunicorn_pids), _cpu_seconds(postgres_pids)
        own = os.times()
        started = time.monotonic()
        threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=args.duration + args.timeout + 5)
        elapsed = time.monotonic() - started
        own_after = os.times()
        # Processes that lived through the run: a worker restarted meanwhile takes its seconds with it.
        gunicorn_cpu = _cpu_seconds(gunicorn_pids) - gunicorn_cpu
        postgres_cpu = _cpu_seconds(servers.postgres_pids()) - postgres_cpu
        rss = _rss_mb(server.pids())
        load_after = os.getloadavg()
    finally:
        server.stop()
    everything = [ms for samples in latencies.values() for ms in samples]
    total = len(everything)
    return {
        "config": config.name,
        "requests": total,
        "errors": sum(errors.values()),
        "error_samples": error_samples,
        "requests_per_second": round(total / elapsed, 1),
        "p50_ms": round(percentile(everything, 50), 1),
        "p95_ms": round(percentile(everything, 95), 1),
        "operations": {op: {**summarize(samples), "errors": errors[op]} for op, samples in latencies.items()},
        "cpu_ms_per_request": {
            "gunicorn": round(gunicorn_cpu / total * 1000, 1) if total else None,
            "postgres": round(postgres_cpu / total * 1000, 1) if total else None,
            "client": round(((own_after.user + own_after.system) - (own.user + own.system)) / total * 1000, 1)
            if total
            else None,
        },
        "gunicorn_rss_mb": rss,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "warm_up_rounds_s": warm_up_rounds,
        "elapsed_s": round(elapsed, 1),
    }


def print_report(result: dict) -> None:
    runs = result["runs"]
    # Ratios against the first configuration given, measured in the same round.
    first = runs[0]["config"] if runs else None
    base = {run["round"]: run["requests_per_second"] for run in runs if run["config"] == first}
    print(
        f"\n{'round':>5} {'config':<12} {'req/s':>7} {'ratio':>6} {'p50 ms':>8} {'p95 ms':>8} {'err':>5} "
        f"{'cpu ms/req web+pg':>18} {'RSS MB':>7} {'load before -> after':>22}"
    )
    for run in runs:
        cpu = run["cpu_ms_per_request"]
        ratio = run["requests_per_second"] / base[run["round"]] if base.get(run["round"]) else float("nan")
        print(
            f"{run['round']:>5} {run['config']:<12} {run['requests_per_second']:>7.1f} {ratio:>6.2f} "
            f"{run['p50_ms']:>8.1f} {run['p95_ms']:>8.1f} {run['errors']:>5} "
            f"{cpu['gunicorn']:>9}+{cpu['postgres']:<8} {run['gunicorn_rss_mb']:>7.0f} "
            f"{run['load_before'][0]:>10.2f} -> {run['load_after'][0]:<8.2f}"
        )
    print("\np50 / p95 ms per operation")
    for run in runs:
        cells = "  ".join(
            f"{op} {row['p50_ms']:.0f}/{row['p95_ms']:.0f}" for op, row in run["operations"].items()
        )
        print(f"{run['round']:>5} {run['config']:<12} {cells}")
    for run in runs:
        for sample in run["error_samples"]:
            print(f"  {run['config']} error: {sample}")
    print(f"\ncores {result['machine']['cores']}, seeding {result['seed']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="Comma-separated sync:W or gthread:WxT.")
    parser.add_argument("--clients", type=int, default=16, help="Concurrent connections, no pause.")
    parser.add_argument("--duration", type=float, default=30, help="Seconds of load per configuration.")
    parser.add_argument("--rounds", type=int, default=2, help="The second round runs in reverse order.")
    parser.add_argument("--timeout", type=float, default=60, help="Seconds a request may take.")
    parser.add_argument("--startup-timeout", type=float, default=300)
    parser.add_argument("--drain-timeout", type=float, default=600)
    parser.add_argument("--json", help="Default: bench/results/gunicorn_workers-<time>.json")
    args = parser.parse_args()
    configs = [Config(text.strip()) for text in args.configs.split(",") if text.strip()]

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_dir = BASE_DIR / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    log_path = results_dir / f"gunicorn_workers-{stamp}.log"
    json_path = args.json or str(results_dir / f"gunicorn_workers-{stamp}.json")
    root = Path(tempfile.mkdtemp(prefix="memory-bench-gunicorn-"))
    # Registered first, so it runs last at exit: after the PostgreSQL server's own clean-up.
    atexit.register(shutil.rmtree, root, True)
    servers = None
    clients: list[Client] = []
    result = {"machine": {"cores": os.cpu_count()}, "config": vars(args), "runs": []}
    try:
        servers = Servers(root)
        servers.manage("migrate", "--no-input")
        out = servers.manage(
            "shell",
            "-c",
            PROVISION.format(name=f"bench-gunicorn-{stamp}", agents=args.clients, procedures=PROCEDURES),
        )
        keys = next(
            json.loads(line[len("BENCH-KEYS ") :])
            for line in out.splitlines()
            if line.startswith("BENCH-KEYS ")
        )
        clients = [
            Client(index=i, url="http://127.0.0.1", key=key, timeout=args.timeout)
            for i, key in enumerate(keys)
        ]
        print(f"seeding {len(clients)} clients (log: {log_path})")
        result["seed"] = seed(servers, clients, log_path, args)
        print(f"seeded: {result['seed']}")
        for round_number in range(1, args.rounds + 1):
            order = configs if round_number % 2 else list(reversed(configs))
            for config in order:
                run = measure(servers, config, clients, log_path, args)
                run["round"] = round_number
                result["runs"].append(run)
                print(
                    f"round {round_number} {config.name}: {run['requests_per_second']} req/s, "
                    f"p50 {run['p50_ms']} ms, p95 {run['p95_ms']} ms, errors {run['errors']}, "
                    f"load {run['load_before'][0]} -> {run['load_after'][0]}",
                    flush=True,
                )
                # Background writes of the previous run (autovacuum, checkpoints) settle first.
                time.sleep(3)
    finally:
        for client in clients:
            client.http.close()
        if servers is not None:
            # The PostgreSQL server is stopped and deleted at exit (cleanup_mode="delete").
            servers.stop()
        shutil.rmtree(root / "var", ignore_errors=True)
        shutil.rmtree(root / "valkey", ignore_errors=True)
    print_report(result)
    write_json(json_path, result)
    print(f"figures: {json_path}")


if __name__ == "__main__":
    main()
