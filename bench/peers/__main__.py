"""Side by side with mem0 2.2.1: the same data set, one machine, one PostgreSQL (issue 17).

    python -m bench.peers                 # 3 pairs at 2,000, then 100,000 (~35 min at quiet load)
    python -m bench.peers --quick         # 1 pair at 2,000, no 100,000 (~4-8 min)
    python -m bench.peers --size 20000    # the large set at 20,000 instead of 100,000
    python -m bench.peers --size 0        # only the pairs at 2,000

mem0ai 2.2.1 is installed into its own virtualenv (var/peers-venv, by bench/peers/setup_venv.sh
from requirements-peers.txt, run here when missing); it is never a dependency of the service.

One process tree: this driver starts a throwaway embedded PostgreSQL (and the Valkey the
service's cache needs), with a database for each side (`memory` for ours, migrated; `mem0`),
then `gunicorn memory_project.wsgi:application` gthread 2x4 as `serve` runs it, and mem0 in a
subprocess of the peers' virtualenv (bench/peers/mem0_side.py: `Memory.from_config`, pgvector
store, huggingface embedder on the packaged all-MiniLM-L6-v2, `infer=False`, no LLM call).
Both load the same generated memories (bench/peers/dataset.py: 20 people, fixed seeds) and
run the same 200 person-scoped queries, top 10.

Our side is measured from this process over HTTP (one keep-alive connection, so one worker):
POST /api/v1/episodic-entries/ per memory, POST /api/v1/episodic-entries/search/ per query.
mem0's side is timed in its process around `Memory.add` / `Memory.search`; it pays no HTTP.

At 2,000 (`--pairs`, default 3): each pair loads the 2,000 memories one at a time on both sides
(the add figures), into a fresh scope (our side: a new workspace; mem0: a new collection), then
runs the 200 queries; the sides alternate (ours first in odd pairs, mem0 first in even ones).
- search without the query's embedding: ours repeats the queries on the same connection, so the
  worker's query-vector cache answers the embedding; mem0's embedder answers from vectors
  computed beforehand (untimed); both run their whole search path otherwise;
- query embedding alone: ours in a `manage.py shell` of the same settings (the provider's
  encoder, no cache); mem0's `embedding_model.embed`.
At `--size` (default 100,000): both sides load in bulk (ours: POST .../batch/ of `--batch-size`,
500 by default, from one connection; mem0: its embedder's `embed_batch` of 1,000 and its vector
store's `insert`), then
`--adds` more memories one at a time and the 200 queries are measured as above. Between the
load and the measures both databases are vacuumed and analyzed, the state autovacuum leaves
them in a minute after such a load; `--unvacuumed` measures that minute instead (the JSON's
`autovacuum` says which tables autovacuum worked on, and when).

Reported per size: p50/p95 of add, adds per second, search, search without embedding, query
embedding; short results (searches answering fewer than 10) and the expected memory in the
top 10; the ratio mem0 / ours (higher is better for us; for adds per second ours / mem0);
the batch endpoint's entries per second against mem0's one-at-a-time adds per second; the
load average before and after each side. Figures go to bench/results/peers-<time>.json.
Everything started here is stopped by its process id.
"""

import argparse
import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.gunicorn_workers import Config, Gunicorn, Servers
from bench.harness import autovacuum_report, percentile, write_json
from bench.peers import dataset

BASE_DIR = Path(__file__).resolve().parent.parent.parent
PEERS_VENV = BASE_DIR / "var" / "peers-venv"
K = 10
# Memories per batch call in the bulk load: the endpoint's default maximum
# (EPISODIC_CREATE_BATCH_MAX; runs before Z sent 100).
BATCH = 500
WARM_UP = 10

PROVISION = """
import json
from core.services import agent_get_or_create, api_key_create, workspace_create

keys = {}
for scope in %r:
    workspace = workspace_create(name=f"peers-{scope}")
    agent = agent_get_or_create(workspace=workspace, slug="peers-bench")
    keys[scope] = api_key_create(workspace=workspace, agent=agent, name=f"peers {scope}")[1]
print("PEERS-KEYS " + json.dumps(keys))
"""

# The service's query encoder alone, as the web workers run it (same settings, and the
# runtime searches embed their queries on: `LocalEmbeddingProvider.query_runtime`).
EMBED_ALONE = """
import json, time
from core.embeddings import LocalEmbeddingProvider
provider = LocalEmbeddingProvider()
texts = %r
for text in texts[:10]:
    provider._encode([text], runtime=provider.query_runtime)
samples = []
for text in texts:
    t0 = time.perf_counter()
    provider._encode([text], runtime=provider.query_runtime)
    samples.append((time.perf_counter() - t0) * 1000)
print("PEERS-EMBED " + json.dumps(
    {"ms": samples, "runtime": provider.query_runtime, "stored_runtime": provider.runtime,
     "model": provider.model_name}
))
"""


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def stats(samples: list[float]) -> dict:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50), 2),
        "p95_ms": round(percentile(samples, 95), 2),
    }


def vacuum(uri: str) -> float:
    """`VACUUM (ANALYZE)` of the whole database at `uri`; the seconds it took."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return round(time.monotonic() - started, 1)


def autovacuums(uri: str) -> dict:
    """`bench.harness.autovacuum_report` of the large tables of the database at `uri`."""
    import psycopg

    with psycopg.connect(uri) as conn, conn.cursor() as cursor:
        return autovacuum_report(cursor)


def quality(results: list[list[str]], expected: list[str | None]) -> dict:
    short = sum(1 for ids in results if len(ids) < K)
    hits = sum(1 for ids, want in zip(results, expected, strict=True) if want and want in ids[:K])
    return {"short_results": short, "expected_in_top10": hits, "queries": len(results)}


# mem0 -----------------------------------------------------------------------------------------


class Mem0:
    """The mem0 subprocess (bench/peers/mem0_side.py) in the peers' virtualenv."""

    def __init__(self, root: Path, log_path: Path):
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONPATH")
        }
        env.update(
            PYTHONPATH=str(BASE_DIR),
            MEM0_TELEMETRY="False",
            MEM0_DIR=str(root / "mem0"),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )
        self.log = open(log_path, "a")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [str(PEERS_VENV / "bin" / "python"), "-m", "bench.peers.mem0_side"],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def call(self, op: str, **kwargs) -> dict:
        self.process.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
                if not result.pop("ok"):
                    raise RuntimeError(f"mem0 {op}: {result['error']}\n{result['trace']}")
                return result
        raise RuntimeError(f"the mem0 process exited ({self.process.wait()}); see {self.log.name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def mem0_scope(mem0: Mem0, uri: str, scope: str, root: Path, threads: int) -> dict:
    opened = mem0.call(
        "open",
        threads=threads,
        db={"connection_string": uri},
        collection=f"mem0_{scope}",
        history=str(root / "mem0" / f"history-{scope}.db"),
    )
    # Warm-up: the model's first calls and the pool's first connections are start-up.
    warm = [[-(i + 1), 0, f"Warm-up note number {chr(97 + i)} about nothing."] for i in range(WARM_UP)]
    mem0.call("add", memories=[[m[0], m[1], m[2]] for m in warm], scope=f"{scope}-warmup")
    mem0.call("search", queries=[[0, "warm-up note"]] * WARM_UP, scope=f"{scope}-warmup")
    return opened


def mem0_measure(mem0: Mem0, scope: str, adds: list, queries: list, expected_index: list) -> dict:
    out: dict = {"load_before": load()}
    added = mem0.call("add", memories=adds, scope=scope)
    out["add"] = {**stats(added["ms"]), "adds_per_second": round(len(adds) / added["seconds"], 1)}
    ids = {int(k): v for k, v in added["ids"].items()}
    out.update(mem0_search(mem0, scope, queries, expected_index, ids))
    out["load_after"] = load()
    return out, ids


def mem0_search(mem0: Mem0, scope: str, queries: list, expected_index: list, ids: dict) -> dict:
    pairs = [[q.person, q.text] for q in queries]
    searched = mem0.call("search", queries=pairs, scope=scope)
    bare = mem0.call("search", queries=pairs, scope=scope, precomputed=True)
    embedded = mem0.call("embed", texts=[q.text for q in queries])
    expected = [ids.get(index) for index in expected_index]
    return {
        "search": {**stats(searched["ms"]), **quality(searched["ids"], expected)},
        "search_without_embedding": {**stats(bare["ms"]), **quality(bare["ids"], expected)},
        "query_embedding": stats(embedded["ms"]),
    }


# Ours -----------------------------------------------------------------------------------------


def _ok(response: httpx.Response) -> dict:
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:500]}")
    return response.json()


class Ours:
    def __init__(self, url: str, key: str, timeout: float):
        self.url = url
        self.key = key
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)
        self.people: dict[int, str] = {}

    def close(self) -> None:
        self.http.close()

    def identify(self, scope: str) -> None:
        for person in [*range(dataset.PEOPLE), -1]:
            name = dataset.person_name(person) if person >= 0 else "warmup"
            body = {"channel": "peers-bench", "external_id": f"{scope}-{name}"}
            self.people[person] = _ok(self.http.post("/api/v1/memory-users/identify/", json=body))[
                "memory_user"
            ]["id"]

    def warm_up(self) -> None:
        """Every worker embeds and queries once (its first embedding loads the model), then
        this connection warms up like mem0's side does."""

        def one():
            with httpx.Client(
                base_url=self.url, headers=self.http.headers, timeout=self.http.timeout
            ) as http:
                for _ in range(3):
                    body = {"memory_user": self.people[-1], "query": "warm-up note"}
                    _ok(http.post("/api/v1/episodic-entries/search/", json=body))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for i in range(WARM_UP):
            body = {
                "memory_user": self.people[-1],
                "content": f"Warm-up note number {chr(97 + i)} about nothing.",
            }
            _ok(self.http.post("/api/v1/episodic-entries/", json=body))
            _ok(
                self.http.post(
                    "/api/v1/episodic-entries/search/",
                    json={"memory_user": self.people[-1], "query": "warm-up note"},
                )
            )

    def add(self, memories: list[dataset.Memory]) -> tuple[dict, dict]:
        samples, ids, outcomes = [], {}, {}
        started = time.perf_counter()
        for memory in memories:
            body = {"memory_user": self.people[memory.person], "content": memory.content}
            t0 = time.perf_counter()
            response = self.http.post("/api/v1/episodic-entries/", json=body)
            samples.append((time.perf_counter() - t0) * 1000)
            data = _ok(response)
            ids[memory.index] = data["id"]
            reason = data["reason"] or "created"
            outcomes[reason] = outcomes.get(reason, 0) + 1
        seconds = time.perf_counter() - started
        return {
            **stats(samples),
            "adds_per_second": round(len(memories) / seconds, 1),
            "outcomes": outcomes,
        }, ids

    def bulk(self, memories: list[dataset.Memory], *, batch: int = BATCH) -> tuple[dict, dict]:
        """The batch endpoint, `batch` memories of one person a call, one call at a time."""
        by_person: dict[int, list[dataset.Memory]] = {}
        for memory in memories:
            by_person.setdefault(memory.person, []).append(memory)
        calls, ids, outcomes = [], {}, {}
        started = time.perf_counter()
        for person, items in by_person.items():
            for start in range(0, len(items), batch):
                chunk = items[start : start + batch]
                body = {"memory_user": self.people[person], "items": [{"content": m.content} for m in chunk]}
                t0 = time.perf_counter()
                response = self.http.post("/api/v1/episodic-entries/batch/", json=body)
                calls.append((time.perf_counter() - t0) * 1000)
                data = _ok(response)
                for memory, result in zip(chunk, data["results"], strict=True):
                    ids[memory.index] = result["entry"]["id"]
                    reason = result["reason"] or result["status"]
                    outcomes[reason] = outcomes.get(reason, 0) + 1
        seconds = time.perf_counter() - started
        return {
            "seconds": round(seconds, 1),
            "per_second": round(len(memories) / seconds, 1),
            "call": stats(calls),
            "outcomes": outcomes,
        }, ids

    def search(self, queries: list[dataset.Query]) -> tuple[list[float], list[list[str]]]:
        samples, results = [], []
        for query in queries:
            body = {"memory_user": self.people[query.person], "query": query.text, "top_k": K}
            t0 = time.perf_counter()
            response = self.http.post("/api/v1/episodic-entries/search/", json=body)
            samples.append((time.perf_counter() - t0) * 1000)
            results.append([hit["entry"]["id"] for hit in _ok(response)["results"]])
        return samples, results

    def round_trip(self, count: int = 200) -> dict:
        """GET /healthz on the same connection: what HTTP adds to every one of our figures."""
        samples = []
        for _ in range(count):
            t0 = time.perf_counter()
            self.http.get("/healthz").raise_for_status()
            samples.append((time.perf_counter() - t0) * 1000)
        return stats(samples)

    def measure_search(self, queries: list[dataset.Query], ids: dict) -> dict:
        expected = [ids.get(q.expected) for q in queries]
        first, found = self.search(queries)
        # The same queries on the same connection (the same worker): the query vectors now
        # come from the worker's cache, so this is the search without the embedding.
        again, found_again = self.search(queries)
        return {
            "search": {**stats(first), **quality(found, expected)},
            "search_without_embedding": {**stats(again), **quality(found_again, expected)},
        }


def ours_measure(ours: Ours, adds: list, queries: list) -> tuple[dict, dict]:
    out: dict = {"load_before": load()}
    out["add"], ids = ours.add(adds)
    out.update(ours.measure_search(queries, ids))
    out["http_round_trip"] = ours.round_trip()
    out["load_after"] = load()
    return out, ids


# Driver ---------------------------------------------------------------------------------------


def ensure_venv() -> None:
    if not (PEERS_VENV / "bin" / "python").exists():
        subprocess.run(["sh", str(BASE_DIR / "bench" / "peers" / "setup_venv.sh")], check=True)


def pooled(runs: list[dict], side: str) -> dict:
    """One side's figures over the pairs: medians of the per-pair percentiles and rates, sums
    of the counts."""
    import statistics

    def med(path):
        values = []
        for run in runs:
            value = run[side]
            for part in path:
                value = value[part]
            values.append(value)
        return round(statistics.median(values), 2)

    out = {}
    for metric in ("add", "search", "search_without_embedding", "query_embedding"):
        if metric not in runs[0][side]:
            continue
        out[metric] = {"p50_ms": med((metric, "p50_ms")), "p95_ms": med((metric, "p95_ms"))}
    out["add"]["adds_per_second"] = med(("add", "adds_per_second"))
    if "http_round_trip" in runs[0][side]:
        out["http_round_trip"] = {
            "p50_ms": med(("http_round_trip", "p50_ms")),
            "p95_ms": med(("http_round_trip", "p95_ms")),
        }
    for metric in ("search", "search_without_embedding"):
        for count in ("short_results", "expected_in_top10", "queries"):
            out[metric][count] = sum(run[side][metric][count] for run in runs)
    return out


def ratios(ours: dict, mem0: dict) -> dict:
    out = {}
    for metric in ("add", "search", "search_without_embedding", "query_embedding"):
        if metric in ours and metric in mem0:
            for pct in ("p50_ms", "p95_ms"):
                out[f"{metric}_{pct[:3]}"] = round(mem0[metric][pct] / ours[metric][pct], 2)
    out["adds_per_second"] = round(ours["add"]["adds_per_second"] / mem0["add"]["adds_per_second"], 2)
    return out


def print_table(label: str, block: dict) -> None:
    ours, mem0, ratio = block["ours"], block["mem0"], block["ratio"]
    print(f"\n{label}  (load before/after: {block['load']})")
    print(f"{'':<36} {'ours':>16} {'mem0 2.2.1':>16} {'mem0 / ours':>12}")
    for metric, name in (
        ("add", "add one (embed + store) p50 / p95"),
        ("search", "search k=10 p50 / p95"),
        ("search_without_embedding", "search without embedding p50 / p95"),
        ("query_embedding", "query embedding alone p50 / p95"),
    ):
        if metric not in ours:
            continue
        o, m = ours[metric], mem0[metric]
        r = f"{ratio[metric + '_p50']:.1f}x / {ratio[metric + '_p95']:.1f}x"
        ours_pct = f"{o['p50_ms']:.1f} / {o['p95_ms']:.1f}"
        mem0_pct = f"{m['p50_ms']:.1f} / {m['p95_ms']:.1f}"
        print(f"{name:<36} {ours_pct:>16} {mem0_pct:>16} {r:>12}")
    print(
        f"{'adds per second, one at a time':<36} {ours['add']['adds_per_second']:>16.1f} "
        f"{mem0['add']['adds_per_second']:>16.1f} {'ours ' + str(ratio['adds_per_second']) + 'x':>12}"
    )
    if "http_round_trip" in ours:
        h = ours["http_round_trip"]
        print(f"{'(ours) HTTP round trip, GET /healthz':<36} {h['p50_ms']:>7.1f} / {h['p95_ms']:<6.1f}")
    for metric in ("search", "search_without_embedding"):
        o, m = ours[metric], mem0[metric]
        ours_q = f"{o['short_results']} short, {o['expected_in_top10']}/{o['queries']}"
        mem0_q = f"{m['short_results']} short, {m['expected_in_top10']}/{m['queries']}"
        label = "search" if metric == "search" else "search w/o embedding"
        print(f"{label + ': short, top-10 hits':<36} {ours_q:>16} {mem0_q:>16}")
    if "bulk" in block:
        b = block["bulk"]
        ours_rate, mem0_rate = b["ours"]["per_second"], b["mem0"]["per_second"]
        print(f"{'bulk load, memories per second':<36} {ours_rate:>16.1f} {mem0_rate:>16.1f}")
        print(
            f"batch endpoint {b['ours']['per_second']:.0f}/s vs mem0 one-at-a-time "
            f"{mem0['add']['adds_per_second']:.1f}/s: {b['batch_vs_mem0_single']}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="One pair at 2,000 and no large set.")
    parser.add_argument("--pairs", type=int, default=3, help="Interleaved pairs at 2,000.")
    parser.add_argument("--small", type=int, default=2000, help="Memories of the paired runs.")
    parser.add_argument("--size", type=int, default=100_000, help="The large set, loaded in bulk; 0: none.")
    parser.add_argument("--adds", type=int, default=300, help="Adds measured one at a time at --size.")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH,
        help="Memories per call of our batch endpoint in the bulk load (at most the server's "
        "EPISODIC_CREATE_BATCH_MAX, which gunicorn reads from this environment).",
    )
    parser.add_argument(
        "--unvacuumed",
        action="store_true",
        help="Measure the large set right after its bulk loads, while autovacuum works through "
        "them (by default both databases are vacuumed first, the state they are served in).",
    )
    parser.add_argument(
        "--mem0-threads",
        type=int,
        default=1,
        help="torch threads of mem0's embedder (0: torch's default, one per core). 1, like the "
        "service's EMBEDDING_TORCH_THREADS: on a shared 2-core machine torch's default "
        "oversubscribes the cores and is several times slower.",
    )
    parser.add_argument("--config", default="gthread:2x4", help="Gunicorn: sync:W or gthread:WxT.")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--json", help="Default: bench/results/peers-<time>.json")
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.size = 1, 0
    ensure_venv()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_dir = BASE_DIR / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    log_path = results_dir / f"peers-{stamp}.log"
    json_path = args.json or str(results_dir / f"peers-{stamp}.json")
    root = Path(tempfile.mkdtemp(prefix="memory-bench-peers-"))
    atexit.register(shutil.rmtree, root, True)
    (root / "mem0").mkdir()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=BASE_DIR, capture_output=True, text=True
    )
    result: dict = {
        "commit": head.stdout.strip(),
        # The bench runs the working tree: files changed but not committed when it started.
        "uncommitted_files": len(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=BASE_DIR,
                capture_output=True,
                text=True,
            ).stdout.splitlines()
        ),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "config": vars(args),
        "machine": {"cores": os.cpu_count(), "load_at_start": load()},
    }
    started = time.monotonic()
    servers = server = mem0 = ours = None
    try:
        servers = Servers(root)
        for name in ("memory", "mem0"):
            servers.postgres.psql(f'CREATE DATABASE "{name}";')
        servers.env["DATABASE_URL"] = servers.postgres.get_uri(database="memory")
        # Both sides embed with all-MiniLM-L6-v2 (issue 17), whatever this shell chose.
        servers.env["EMBEDDING_LOCAL_MODEL"] = "all-MiniLM-L6-v2"
        mem0_uri = servers.postgres.get_uri(database="mem0")
        servers.manage("migrate", "--no-input")
        scopes = [f"pair{i}" for i in range(1, args.pairs + 1)] + (["large"] if args.size else [])
        out = servers.manage("shell", "-c", PROVISION % (scopes,))
        keys = next(
            json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("PEERS-KEYS ")
        )
        server = Gunicorn(servers, Config(args.config), log_path)
        server.wait_healthy(300)
        mem0 = Mem0(root, log_path)

        small = dataset.memories(args.small)
        small_queries = dataset.queries(small)
        expected_index = [q.expected for q in small_queries]
        runs = []
        for pair in range(1, args.pairs + 1):
            scope = f"pair{pair}"
            run: dict = {"pair": pair}
            ours = Ours(server.url, keys[scope], args.timeout)
            ours.identify(scope)
            ours.warm_up()
            result["mem0_open"] = mem0_scope(mem0, mem0_uri, scope, root, args.mem0_threads)
            order = ("ours", "mem0") if pair % 2 else ("mem0", "ours")
            for side in order:
                if side == "ours":
                    run["ours"], _ = ours_measure(ours, small, small_queries)
                else:
                    payload = [[m.index, m.person, m.content] for m in small]
                    run["mem0"], _ = mem0_measure(mem0, scope, payload, small_queries, expected_index)
                print(f"pair {pair} {side}: {json.dumps(run[side])}", flush=True)
                time.sleep(2)
            ours.close()
            runs.append(run)

        # The service's query encoder alone, in a process of the same settings.
        texts = [q.text for q in small_queries]
        out = servers.manage("shell", "-c", EMBED_ALONE % (texts,))
        embedded = next(
            json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("PEERS-EMBED ")
        )
        for run in runs:
            run["ours"]["query_embedding"] = stats(embedded["ms"])
        result["ours_embedding"] = {
            "runtime": embedded["runtime"],
            "stored_runtime": embedded["stored_runtime"],
            "model": embedded["model"],
        }
        block = {"ours": pooled(runs, "ours"), "mem0": pooled(runs, "mem0"), "pairs": runs}
        block["ratio"] = ratios(block["ours"], block["mem0"])
        block["load"] = f"{runs[0]['ours']['load_before'][0]} .. {runs[-1]['mem0']['load_after'][0]}"
        result["small"] = block
        print_table(f"{args.small:,} memories, {len(small_queries)} queries, {args.pairs} pairs", block)

        if args.size:
            scope = "large"
            corpus = dataset.memories(args.size)
            big_queries = dataset.queries(corpus)
            extra = dataset.extra_memories(args.size, args.adds)
            ours = Ours(server.url, keys[scope], args.timeout)
            ours.identify(scope)
            ours.warm_up()
            result["mem0_open"] = mem0_scope(mem0, mem0_uri, scope, root, args.mem0_threads)
            mem0.call("corpus", size=args.size)
            big: dict = {"load_before_bulk": load()}
            print(f"loading {args.size:,} memories in bulk (ours, then mem0)", flush=True)
            ours_bulk, ours_ids = ours.bulk(corpus, batch=args.batch_size)
            ours_bulk["batch_size"] = args.batch_size
            print(f"ours bulk: {json.dumps(ours_bulk)}", flush=True)
            mem0_bulk = mem0.call("bulk", scope=scope)
            mem0_ids = {int(k): v for k, v in mem0_bulk.pop("ids").items()}
            mem0_bulk = {k: round(v, 1) for k, v in mem0_bulk.items()}
            print(f"mem0 bulk: {json.dumps(mem0_bulk)}", flush=True)
            big["rows"] = {"mem0": mem0.call("count")["rows"]}
            databases = {name: servers.postgres.get_uri(database=name) for name in ("memory", "mem0")}
            # Each load is past autovacuum's insert threshold, and a vacuum still running when the
            # measures start shares their two cores (bench.context_assembly's p95 went from 22
            # to 42 ms so, docs/runtime.md). Vacuumed here, the measures start from the same
            # state however the loads' timing fell (docs/speed.md, "At 100,000, the loads
            # vacuumed first").
            big["vacuumed"] = not args.unvacuumed
            if not args.unvacuumed:
                big["vacuum_seconds"] = {name: vacuum(uri) for name, uri in databases.items()}
                print(f"vacuumed: {json.dumps(big['vacuum_seconds'])}", flush=True)
            big["measured_from"] = time.strftime("%H:%M:%S", time.gmtime())
            time.sleep(2)
            # Measured: adds one at a time into the loaded set, then the searches; ours first.
            o: dict = {"load_before": load()}
            o["add"], extra_ids = ours.add(extra)
            ours_ids.update(extra_ids)
            o.update(ours.measure_search(big_queries, ours_ids))
            o["http_round_trip"] = ours.round_trip()
            o["query_embedding"] = stats(embedded["ms"])
            o["load_after"] = load()
            print(f"large ours: {json.dumps(o)}", flush=True)
            time.sleep(2)
            payload = [[m.index, m.person, m.content] for m in extra]
            m: dict = {"load_before": load()}
            added = mem0.call("add", memories=payload, scope=scope)
            m["add"] = {**stats(added["ms"]), "adds_per_second": round(len(extra) / added["seconds"], 1)}
            mem0_ids.update({int(k): v for k, v in added["ids"].items()})
            m.update(mem0_search(mem0, scope, big_queries, [q.expected for q in big_queries], mem0_ids))
            m["load_after"] = load()
            print(f"large mem0: {json.dumps(m)}", flush=True)
            big["autovacuum"] = {name: autovacuums(uri) for name, uri in databases.items()}
            big.update(ours=o, mem0=m, ratio=ratios(o, m))
            big["bulk"] = {
                "ours": ours_bulk,
                "mem0": mem0_bulk,
                "batch_vs_mem0_single": round(ours_bulk["per_second"] / m["add"]["adds_per_second"], 1),
            }
            big["load"] = f"{o['load_before'][0]} .. {m['load_after'][0]}"
            result["large"] = big
            print_table(f"{args.size:,} memories (loaded in bulk), {len(big_queries)} queries", big)
    finally:
        if ours is not None:
            ours.close()
        if mem0 is not None:
            mem0.stop()
        if server is not None:
            server.stop()
        if servers is not None:
            servers.stop()
    result["minutes"] = round((time.monotonic() - started) / 60, 1)
    result["machine"]["load_at_end"] = load()
    write_json(json_path, result)
    print(f"\n{result['minutes']} min; load at start {result['machine']['load_at_start']}, at end {load()}")
    print(f"figures: {json_path}")


if __name__ == "__main__":
    main()
