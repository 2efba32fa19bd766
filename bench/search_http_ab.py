"""Two trees' search over HTTP, side by side, alternated request by request (issue 17).

    python -m bench.search_http_ab --before HEAD~1                # every query embedded
    python -m bench.search_http_ab --before HEAD~1 --cache 1024   # round 1 embeds, later ones hit

`bench.peers` and `bench.episodic_http` measure one tree after another; on this shared machine
the second of two runs is often 1-2 ms slower whatever its code, more than a search's change
moves it. Here both trees answer at once: a throwaway embedded PostgreSQL and Valkey
(bench.gunicorn_workers' Servers), one workspace and agent-bound key, and for each tree
(`--before REF` unpacked with `git archive`, and this working tree) `gunicorn
memory_project.wsgi:application` as `serve` runs it, on the same database. The `bench.peers`
data set (`--size` memories over 20 people, loaded through this tree's batch endpoint, so
both trees search the same rows and vectors) and its 200 person-scoped queries, top 10; each
query goes to both servers, in alternating order, one keep-alive connection each.

`--cache` is EMBEDDING_QUERY_CACHE_SIZE of both servers: 0 (the default) embeds every query;
with a cache, the first round embeds and the rounds after it are answered from the cache.
Reported: p50 / p95 / mean per tree and round, and over all rounds, with the load average.
Everything started here is stopped by its process id. This is a benchmark, not a test.
"""

import argparse
import atexit
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.episodic_http import Tree, _unpack
from bench.gunicorn_workers import Config, Servers
from bench.harness import percentile, write_json
from bench.load_agents import PROVISION
from bench.peers import dataset

BASE_DIR = Path(__file__).resolve().parent.parent
SEARCH = "/api/v1/episodic-entries/search/"
FIGURES = ("p50_ms", "p95_ms", "mean_ms")


def _ok(response: httpx.Response) -> dict:
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:500]}")
    return response.json()


def load(http: httpx.Client, size: int) -> tuple[dict, list]:
    """The data set's people and memories, through the batch endpoint; its queries."""
    people = {}
    for person in range(dataset.PEOPLE):
        body = {"channel": "search-ab", "external_id": dataset.person_name(person)}
        people[person] = _ok(http.post("/api/v1/memory-users/identify/", json=body))["memory_user"]["id"]
    memories = dataset.memories(size)
    by_person: dict = {}
    for memory in memories:
        by_person.setdefault(memory.person, []).append(memory)
    for person, items in by_person.items():
        for start in range(0, len(items), 100):
            body = {
                "memory_user": people[person],
                "items": [{"content": m.content} for m in items[start : start + 100]],
            }
            _ok(http.post("/api/v1/episodic-entries/batch/", json=body))
    return people, dataset.queries(memories)


def warm_up(url: str, headers: dict, person: str) -> None:
    """Every worker thread loads the model (its first query), as in `bench.peers`."""

    def one():
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            for _ in range(5):
                _ok(http.post(SEARCH, json={"memory_user": person, "query": "warm-up note"}))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def stats(samples: list[float]) -> dict:
    return {
        "p50_ms": round(percentile(samples, 50), 2),
        "p95_ms": round(percentile(samples, 95), 2),
        "mean_ms": round(sum(samples) / len(samples), 2),
        "n": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD", help="The git ref compared with this working tree.")
    parser.add_argument("--repo", default=str(BASE_DIR))
    parser.add_argument("--cache", type=int, default=0, help="EMBEDDING_QUERY_CACHE_SIZE of both servers.")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--size", type=int, default=2000, help="Memories of the data set.")
    parser.add_argument("--config", default="gthread:2x4")
    parser.add_argument("--json", help="Default: bench/results/search_http_ab-<time>.json")
    args = parser.parse_args()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_dir = BASE_DIR / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="memory-bench-search-ab-"))
    atexit.register(shutil.rmtree, root, True)
    trees = {args.before: _unpack(args.before, root, args.repo), "this tree": BASE_DIR}
    result: dict = {"config": vars(args), "load_before": os.getloadavg(), "rounds": []}
    servers, running, clients = None, {}, {}
    try:
        servers = Servers(root)
        servers.env["EMBEDDING_QUERY_CACHE_SIZE"] = str(args.cache)
        servers.manage("migrate", "--no-input")
        out = servers.manage(
            "shell", "-c", PROVISION.format(name=f"search-ab-{stamp}", agents=2, procedures=[])
        )
        keys = next(
            json.loads(line[len("BENCH-KEYS ") :])
            for line in out.splitlines()
            if line.startswith("BENCH-KEYS ")
        )
        headers = {"Authorization": f"Bearer {keys[0]}"}
        log_path = results_dir / f"search_http_ab-{stamp}.log"
        for label, cwd in trees.items():
            running[label] = Tree(servers, Config(args.config), log_path, cwd)
        for server in running.values():
            server.wait_healthy(300)
        clients = {
            label: httpx.Client(base_url=s.url, headers=headers, timeout=60) for label, s in running.items()
        }
        people, queries = load(clients["this tree"], args.size)
        for server in running.values():
            warm_up(server.url, headers, people[0])
        labels = list(trees)
        samples: dict = {label: [] for label in labels}
        for number in range(args.rounds):
            rounds: dict = {label: [] for label in labels}
            for index, query in enumerate(queries):
                body = {"memory_user": people[query.person], "query": query.text, "top_k": 10}
                for label in labels if (index + number) % 2 else reversed(labels):
                    started = time.perf_counter()
                    response = clients[label].post(SEARCH, json=body)
                    rounds[label].append((time.perf_counter() - started) * 1000)
                    _ok(response)
            result["rounds"].append({label: stats(s) for label, s in rounds.items()})
            for label in labels:
                samples[label] += rounds[label]
                figures = stats(rounds[label])
                line = " / ".join(str(figures[k]) for k in FIGURES)
                print(f"round {number + 1} {label:<12} p50 / p95 / mean ms", line, flush=True)
        result["all"] = {label: stats(s) for label, s in samples.items()}
    finally:
        for client in clients.values():
            client.close()
        for server in running.values():
            server.stop()
        if servers is not None:
            servers.stop()
    result["load_after"] = os.getloadavg()
    for label, figures in result["all"].items():
        print(f"all     {label:<12} p50 / p95 / mean ms", " / ".join(str(figures[k]) for k in FIGURES))
    before, after = ([round(x, 2) for x in result[k]] for k in ("load_before", "load_after"))
    print(f"load {before} -> {after}")
    json_path = args.json or str(results_dir / f"search_http_ab-{stamp}.json")
    write_json(json_path, result)
    print(f"figures: {json_path}")


if __name__ == "__main__":
    main()
