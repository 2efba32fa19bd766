"""The episodic add path over HTTP against a real gunicorn (issue 17; docs/speed.md, "Add path").

    python -m bench.episodic_http                         # this tree only
    python -m bench.episodic_http --before HEAD~3         # that commit too, in the same run

Starts a throwaway embedded PostgreSQL and Valkey (bench.gunicorn_workers' Servers), migrates,
provisions one workspace with agent-bound keys, and for each tree (with `--before REF`, the
files of REF unpacked with `git archive` into a temporary directory, then this working tree;
both on the same database, each with a person of its own) starts
`gunicorn memory_project.wsgi:application` as `serve` runs it (gthread 2x4 by default) and
measures, from this process:

- batch adds: `--batches` calls of POST /api/v1/episodic-entries/batch/ with 100 new entries
  each (they also seed the person, so the single adds below dedupe against ~1,000 entries);
  entries per second and the p50/p95 of a call;
- single adds, one at a time: `--adds` POST /api/v1/episodic-entries/ of new sentences from
  one connection; p50/p95 and adds per second (the figure compared with mem0's in-process
  `add` loop);
- single adds from `--clients` connections at once: adds per second;
- exact repeats of stored entries (the hash decides): p50/p95;
- searches (POST /api/v1/episodic-entries/search/, hybrid, top 5): p50/p95.

The local embedding model embeds (no embedding endpoint is configured); no Celery worker runs,
as in a deployment whose workers have cores of their own. The load average is printed
before and after each tree. Everything started here is stopped by its process id.
"""

import argparse
import atexit
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.gunicorn_workers import Config, Gunicorn, Servers, _cpu_seconds
from bench.harness import summarize, write_json
from bench.load_agents import PROVISION

BASE_DIR = Path(__file__).resolve().parent.parent
BATCH_SIZE = 100

# Varied sentences about one person, so that most are new claims rather than near-duplicates
# (a template with only the names swapped would be consolidated or refused as similar).
NAMES = ("Ada", "Her sister Mia", "Her manager Tom", "Her son Leo", "Her neighbour Raj", "Dr. Okafor")
VERBS = ("booked", "cancelled", "asked about", "paid for", "complained about", "recommended", "forgot")
ADJECTIVES = ("cheap", "late", "quiet", "vegan", "second-hand", "weekly", "urgent", "noisy", "Italian")
NOUNS = (
    "flight to Lisbon", "dentist appointment", "piano lessons", "train ticket to Porto", "table at Nopa",
    "bicycle repair", "birthday cake", "plumber's invoice", "yoga class", "car insurance",
    "hotel in Vienna", "gym membership", "vet visit", "concert tickets", "mortgage renewal",
    "Spanish course", "running shoes", "tax return", "wedding venue", "laptop battery", "garden fence",
)  # fmt: skip
WHEN = ("last Monday", "in March", "for next week", "twice this year", "on her birthday", "in 2024")
WHY = ("because of the price", "for her daughter", "after the storm", "before moving", "with a coupon", "")


CORPUS_SEED = 17


class Corpus:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.count = 0

    def sentence(self) -> str:
        rng = self.rng
        self.count += 1
        return (
            f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} "
            f"{rng.choice(WHEN)} {rng.choice(WHY)} (case {rng.randrange(10**5)}-{self.count})."
        ).replace("  ", " ")


class Tree(Gunicorn):
    """`Gunicorn` run from another directory (the files of an earlier commit)."""

    def __init__(self, servers: Servers, config: Config, log_path: Path, cwd: Path):
        import bench.gunicorn_workers as workers

        saved = workers.BASE_DIR
        workers.BASE_DIR = cwd
        try:
            super().__init__(servers, config, log_path)
        finally:
            workers.BASE_DIR = saved


def _timed(http: httpx.Client, path: str, body: dict) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = http.post(path, json=body)
    return (time.perf_counter() - started) * 1000, response


def _check(response: httpx.Response) -> dict:
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:500]}")
    return response.json()


class Cpu:
    """CPU seconds of the gunicorn and PostgreSQL processes over a phase: on a shared machine
    a steadier figure than wall time, which other processes' load stretches."""

    def __init__(self, server: Gunicorn, servers: Servers):
        self.server, self.servers = server, servers

    def _postgres(self) -> float:
        # Backends that exited meanwhile (CONN_MAX_AGE) count in the postmaster's cutime/cstime.
        pids = self.servers.postgres_pids()
        if not pids:
            return 0.0
        try:
            fields = Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()
            reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            reaped = 0.0
        return _cpu_seconds(pids) + reaped

    def __enter__(self):
        self.web = _cpu_seconds(self.server.pids())
        self.db = self._postgres()
        return self

    def __exit__(self, *exc):
        self.web = _cpu_seconds(self.server.pids()) - self.web
        self.db = self._postgres() - self.db

    def per(self, count: int) -> dict:
        return {"web": round(self.web / count * 1000, 2), "postgres": round(self.db / count * 1000, 2)}


def measure_tree(label: str, server: Gunicorn, servers: Servers, keys: list[str], args) -> dict:
    url = server.url
    # The same sentences for every tree (each has a person of its own), so that their
    # outcomes and timings compare like for like.
    corpus = Corpus(seed=CORPUS_SEED)
    headers = {"Authorization": f"Bearer {keys[0]}"}
    out: dict = {"tree": label, "load_before": [round(x, 2) for x in os.getloadavg()]}
    with httpx.Client(base_url=url, headers=headers, timeout=args.timeout) as http:
        person = _check(
            http.post(
                "/api/v1/memory-users/identify/",
                json={"channel": "bench", "external_id": f"{label}-{time.time_ns()}"},
            )
        )["memory_user"]["id"]
        base = {"memory_user": person}
        # Warm-up: each worker's first embedding and first queries are start-up, not load.
        for _ in range(8):
            _check(http.post("/api/v1/episodic-entries/", json={**base, "content": corpus.sentence()}))
            _check(http.post("/api/v1/episodic-entries/search/", json={**base, "query": "a flight"}))

        calls, entries, reasons = [], 0, Counter()
        started = time.perf_counter()
        with Cpu(server, servers) as cpu:
            for _ in range(args.batches):
                items = [{"content": corpus.sentence()} for _ in range(BATCH_SIZE)]
                ms, response = _timed(http, "/api/v1/episodic-entries/batch/", {**base, "items": items})
                body = _check(response)
                calls.append(ms)
                entries += len(items)
                reasons.update(r["reason"] or "created" for r in body["results"])
        elapsed = time.perf_counter() - started
        out["batch"] = {
            **summarize(calls),
            "entries_per_second": round(entries / elapsed, 1),
            "cpu_ms_per_entry": cpu.per(entries),
            "outcomes": dict(reasons),
        }

        samples, reasons = [], Counter()
        started = time.perf_counter()
        stored = []
        with Cpu(server, servers) as cpu:
            for _ in range(args.adds):
                ms, response = _timed(
                    http, "/api/v1/episodic-entries/", {**base, "content": corpus.sentence()}
                )
                body = _check(response)
                samples.append(ms)
                reasons[body["reason"] or "created"] += 1
                if body["created"]:
                    stored.append(body["content"])
        elapsed = time.perf_counter() - started
        out["add_one_at_a_time"] = {
            **summarize(samples),
            "adds_per_second": round(len(samples) / elapsed, 1),
            "cpu_ms_per_add": cpu.per(len(samples)),
            "outcomes": dict(reasons),
        }

        # Repeats of entries stored (and still active: a later add may have replaced one).
        repeats, reasons = [], Counter()
        for content in stored[-args.repeats :]:
            ms, response = _timed(http, "/api/v1/episodic-entries/", {**base, "content": content.upper()})
            reason = _check(response)["reason"] or "created"
            reasons[reason] += 1
            if reason == "duplicate_exact":
                repeats.append(ms)
        out["add_exact_repeat"] = {**summarize(repeats), "outcomes": dict(reasons)}

        searches = []
        for _ in range(args.searches):
            query = corpus.sentence().split(",")[0]
            ms, response = _timed(
                http, "/api/v1/episodic-entries/search/", {**base, "query": query, "top_k": 5}
            )
            _check(response)
            searches.append(ms)
        out["search"] = summarize(searches)

    # Concurrent single adds, each connection with its own key and person.
    lock = threading.Lock()
    concurrent: list[float] = []
    errors: list[str] = []

    def client(index: int) -> None:
        key = keys[(index + 1) % len(keys)]
        local = Corpus(seed=1000 + index)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=args.timeout
        ) as h:
            who = _check(
                h.post(
                    "/api/v1/memory-users/identify/",
                    json={"channel": "bench", "external_id": f"{label}-c{index}-{time.time_ns()}"},
                )
            )["memory_user"]["id"]
            barrier.wait()
            for _ in range(args.adds // args.clients):
                ms, response = _timed(
                    h, "/api/v1/episodic-entries/", {"memory_user": who, "content": local.sentence()}
                )
                with lock:
                    concurrent.append(ms)
                    if response.status_code >= 300 and len(errors) < 3:
                        errors.append(f"{response.status_code} {response.text[:200]}")

    barrier = threading.Barrier(args.clients + 1)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    out["add_concurrent"] = {
        **summarize(concurrent),
        "clients": args.clients,
        "adds_per_second": round(len(concurrent) / elapsed, 1),
        "errors": errors,
    }
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _unpack(ref: str, root: Path, repo: str) -> Path:
    target = root / f"tree-{ref.replace('/', '_')}"
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=repo, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def print_report(result: dict) -> None:
    print(
        f"\n{'tree':<14} {'add p50/p95 ms':>15} {'adds/s':>7} {'x' + str(result['config']['clients']):>9} "
        f"{'repeat p50/p95':>15} {'batch entries/s':>16} {'batch p50 ms':>13} {'search p50/p95':>15} "
        f"{'load before -> after':>21}"
    )
    for run in result["runs"]:
        add, con, rep, bat, sea = (
            run["add_one_at_a_time"],
            run["add_concurrent"],
            run["add_exact_repeat"],
            run["batch"],
            run["search"],
        )
        print(
            f"{run['tree']:<14} {add['p50_ms']:>7.1f}/{add['p95_ms']:<7.1f} {add['adds_per_second']:>7.1f} "
            f"{con['adds_per_second']:>9.1f} {rep['p50_ms']:>7.1f}/{rep['p95_ms']:<7.1f} "
            f"{bat['entries_per_second']:>16.1f} {bat['p50_ms']:>13.1f} "
            f"{sea['p50_ms']:>7.1f}/{sea['p95_ms']:<7.1f} "
            f"{run['load_before'][0]:>9.2f} -> {run['load_after'][0]:.2f}"
        )
        print(
            f"{'':<14} cpu ms web+postgres: per add {add['cpu_ms_per_add']['web']}+"
            f"{add['cpu_ms_per_add']['postgres']}, per batch entry {bat['cpu_ms_per_entry']['web']}+"
            f"{bat['cpu_ms_per_entry']['postgres']}"
        )
        print(f"{'':<14} outcomes: single {add['outcomes']}, batch {bat['outcomes']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--before", help="A git ref measured first, from its own files, on the same database."
    )
    parser.add_argument("--repo", default=str(BASE_DIR), help="The git repository --before names a ref of.")
    parser.add_argument("--config", default="gthread:2x4", help="sync:W or gthread:WxT, as serve runs.")
    parser.add_argument("--adds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="With --before: trees alternate per round.")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--startup-timeout", type=float, default=300)
    parser.add_argument("--json", help="Default: bench/results/episodic_http-<time>.json")
    args = parser.parse_args()
    config = Config(args.config)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_dir = BASE_DIR / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    log_path = results_dir / f"episodic_http-{stamp}.log"
    json_path = args.json or str(results_dir / f"episodic_http-{stamp}.json")
    root = Path(tempfile.mkdtemp(prefix="memory-bench-episodic-http-"))
    atexit.register(shutil.rmtree, root, True)
    trees = [("this tree", BASE_DIR)]
    if args.before:
        trees.insert(0, (args.before, _unpack(args.before, root, args.repo)))
    result = {"machine": {"cores": os.cpu_count()}, "config": vars(args), "runs": []}
    servers = None
    try:
        servers = Servers(root)
        servers.manage("migrate", "--no-input")
        out = servers.manage(
            "shell",
            "-c",
            PROVISION.format(name=f"bench-http-{stamp}", agents=args.clients + 1, procedures=[]),
        )
        keys = next(
            json.loads(line[len("BENCH-KEYS ") :])
            for line in out.splitlines()
            if line.startswith("BENCH-KEYS ")
        )
        for round_number in range(1, args.rounds + 1):
            order = trees if round_number % 2 else list(reversed(trees))
            for label, cwd in order:
                server = Tree(servers, config, log_path, cwd)
                try:
                    server.wait_healthy(args.startup_timeout)
                    run = measure_tree(label, server, servers, keys, args)
                finally:
                    server.stop()
                run["round"] = round_number
                result["runs"].append(run)
                print(json.dumps(run), flush=True)
                time.sleep(3)
    finally:
        if servers is not None:
            servers.stop()
    print_report(result)
    write_json(json_path, result)
    print(f"figures: {json_path}")


if __name__ == "__main__":
    main()
