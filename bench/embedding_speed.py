"""Local query embedding: torch vs ONNX Runtime (fp32, int8), threads, concurrency, memory.

    python -m bench.embedding_speed [--queries 300] [--batch-texts 256] [--json OUT]

Every configuration runs in fresh processes (so an ONNX process never has torch imported
and RSS is its own): runtime (torch, onnx, onnx-int8) x intra-op threads
(EMBEDDING_TORCH_THREADS 1, 2) x load (alone; two requester threads in one process, as
gunicorn's gthread worker; two processes at once, as two web workers on 2 cores). Each
requester embeds the same list of queries one at a time through
`LocalEmbeddingProvider.embed([query])` with the query cache off, which is what a search
pays; single-query p50/p95 are over all requesters. Alone, it also measures batch
throughput (texts/s, batches of LOCAL_BATCH_SIZE), load time and RSS, and the query
cache's hit cost. Ratios against torch are from the same run; the load average is printed
before and after. No database is needed.
"""

import argparse
import json
import os
import subprocess
import sys
import time

QUERIES = [
    "what did we decide about the release date?",
    "where does Ada live now",
    "which database did the team pick for the analytics service and why",
    "birthday",
    "What are the user's dietary restrictions?",
    "the bug with the login page on mobile Safari",
    "how many people attended the workshop in Berlin last spring",
    "favourite programming language",
    "Did Maria say anything about moving to Lisbon after the contract ends?",
    "open questions from the quarterly planning meeting",
    "names of the user's children and their ages",
    "deadline for the tax filing",
    "which laptop does Sam use for work",
    "summary of the conversation about hiring a designer, budget and timeline",
    "allergies",
    "what does the customer think about the new pricing tiers compared to the old ones",
]

BATCH_TEXT = (
    "On {n} we talked about the migration of the billing service to the new cluster; "
    "Ada will own the rollout, Sam reviews the runbook and the deadline is the end of the month."
)


def child(args) -> None:
    """One requester process: load, report ready, wait for "go", measure, print JSON."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.bench")
    os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1:1/none")
    import threading

    import django
    import psutil

    django.setup()
    from bench.harness import summarize
    from core.embeddings import LOCAL_BATCH_SIZE, LocalEmbeddingProvider

    process = psutil.Process()
    rss_before = process.memory_info().rss
    provider = LocalEmbeddingProvider(runtime=args.runtime)
    started = time.perf_counter()
    provider.embed(["load"])
    load_ms = (time.perf_counter() - started) * 1000
    for query in QUERIES:  # Warm every shape once.
        provider.embed([query])
    result = {
        "load_ms": round(load_ms, 1),
        "rss_mb": round(process.memory_info().rss / 2**20, 1),
        "rss_model_mb": round((process.memory_info().rss - rss_before) / 2**20, 1),
        "torch_imported": "torch" in sys.modules,
    }
    print("ready", flush=True)
    sys.stdin.readline()

    samples: list[float] = []
    lock = threading.Lock()

    def requester(offset: int) -> None:
        mine = []
        for i in range(args.queries):
            query = QUERIES[(i + offset) % len(QUERIES)]
            start = time.perf_counter()
            provider.embed([query])
            mine.append((time.perf_counter() - start) * 1000)
        with lock:
            samples.extend(mine)

    wall = time.perf_counter()
    threads = [threading.Thread(target=requester, args=(k * 5,)) for k in range(args.threads_in_process)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall_s = time.perf_counter() - wall
    result["single"] = summarize(samples)
    result["samples_ms"] = samples
    result["queries_per_s"] = round(len(samples) / wall_s, 1)

    if args.batch_texts:
        texts = [BATCH_TEXT.format(n=n) for n in range(args.batch_texts)]
        provider.embed(texts[:LOCAL_BATCH_SIZE])
        start = time.perf_counter()
        provider.embed(texts)
        result["batch_texts_per_s"] = round(len(texts) / (time.perf_counter() - start), 1)

    if args.cache:
        from bench.harness import measure
        from core.embeddings import query_cache

        cached = LocalEmbeddingProvider(runtime=args.runtime, cache_scope="bench")
        with override_cache_size(1024):
            cached.embed([QUERIES[0]])
            result["cache_hit"] = measure(lambda: cached.embed([QUERIES[0]]), repeat=2000)
            result["cache_stats"] = query_cache().stats()
    print(json.dumps(result), flush=True)


def override_cache_size(size: int):
    from django.test import override_settings

    return override_settings(EMBEDDING_QUERY_CACHE_SIZE=size)


def run_configuration(*, runtime: str, threads: int, processes: int, threads_in_process: int, args) -> dict:
    env = {
        **os.environ,
        "EMBEDDING_TORCH_THREADS": str(threads),
        "EMBEDDING_QUERY_CACHE_SIZE": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    alone = processes == 1 and threads_in_process == 1
    command = [
        sys.executable,
        "-m",
        "bench.embedding_speed",
        "--child",
        f"--runtime={runtime}",
        f"--queries={args.queries}",
        f"--threads-in-process={threads_in_process}",
        f"--batch-texts={args.batch_texts if alone else 0}",
    ] + (["--cache"] if alone else [])
    children = [
        subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    for proc in children:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"child failed to load {runtime}: {line!r}")
    for proc in children:  # Both start together.
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in children:
        out, _ = proc.communicate(timeout=900)
        results.append(json.loads(out.strip().splitlines()[-1]))
    from bench.harness import summarize

    first = results[0]
    # Every requester's queries ran at once: one distribution, throughput summed.
    first["single"] = summarize([ms for r in results for ms in r.pop("samples_ms")])
    first["queries_per_s"] = round(sum(r["queries_per_s"] for r in results), 1)
    return first


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--runtime", default="onnx")
    parser.add_argument("--runtimes", default="torch,onnx,onnx-int8")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--threads-in-process", type=int, default=1)
    parser.add_argument("--batch-texts", type=int, default=256)
    parser.add_argument("--cache", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return

    loads = {"alone": (1, 1), "2 threads": (1, 2), "2 processes": (2, 1)}
    runtimes = args.runtimes.split(",")
    load_before = os.getloadavg()
    rows = []
    for threads in (1, 2):
        for load, (processes, threads_in_process) in loads.items():
            for runtime in runtimes:
                result = run_configuration(
                    runtime=runtime,
                    threads=threads,
                    processes=processes,
                    threads_in_process=threads_in_process,
                    args=args,
                )
                rows.append({"runtime": runtime, "intra_op_threads": threads, "load": load, **result})
                single = result["single"]
                print(
                    f"{runtime:10} threads={threads} {load:12} p50 {single['p50_ms']:7.2f} ms  "
                    f"p95 {single['p95_ms']:7.2f} ms  {result['queries_per_s']:6.1f} q/s"
                    + (
                        f"  batch {result['batch_texts_per_s']:6.1f} texts/s"
                        if "batch_texts_per_s" in result
                        else ""
                    )
                    + f"  rss {result['rss_mb']:6.1f} MB  load {result['load_ms']:.0f} ms",
                    flush=True,
                )
    load_after = os.getloadavg()

    def find(runtime, threads, load):
        return next(
            r for r in rows if (r["runtime"], r["intra_op_threads"], r["load"]) == (runtime, threads, load)
        )

    print("\nratios against torch in this run (p50 torch / p50 other; batch other / batch torch):")
    ratios = []
    for threads in (1, 2):
        for load in loads:
            base = find("torch", threads, load) if "torch" in runtimes else None
            for runtime in runtimes:
                if base is None or runtime == "torch":
                    continue
                other = find(runtime, threads, load)
                ratio = {
                    "runtime": runtime,
                    "intra_op_threads": threads,
                    "load": load,
                    "single_p50_speedup": round(base["single"]["p50_ms"] / other["single"]["p50_ms"], 2),
                    "single_p95_speedup": round(base["single"]["p95_ms"] / other["single"]["p95_ms"], 2),
                }
                if "batch_texts_per_s" in other:
                    ratio["batch_speedup"] = round(other["batch_texts_per_s"] / base["batch_texts_per_s"], 2)
                    ratio["rss_saved_mb"] = round(base["rss_mb"] - other["rss_mb"], 1)
                ratios.append(ratio)
                print(
                    f"  {runtime:10} threads={threads} {load:12} "
                    + json.dumps(
                        {k: v for k, v in ratio.items() if k not in ("runtime", "intra_op_threads", "load")}
                    )
                )
    for row in rows:
        if "cache_hit" in row:
            print(
                f"  cache hit {row['runtime']:10} threads={row['intra_op_threads']}: "
                f"p50 {row['cache_hit']['p50_ms'] * 1000:.0f} us"
            )
    print(f"load average before {load_before}, after {load_after}; {os.cpu_count()} cores")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"rows": rows, "ratios": ratios, "load_before": load_before, "load_after": load_after},
                out,
                indent=2,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
