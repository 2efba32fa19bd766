"""Shared set-up for benchmarks: a throwaway embedded PostgreSQL, migrated, and timing helpers.

Run a benchmark as `python -m bench.<name>`; it prints a table and, with `--json PATH`,
writes its figures. Benchmarks measure real work through the project's services and
selectors; they are not tests and are not run by CI.
"""

import json
import os
import statistics
import time
from contextlib import contextmanager


def setup_django(*, database_url: str | None = None) -> None:
    """Start a throwaway embedded PostgreSQL (unless DATABASE_URL is set) and migrate it."""
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.bench")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def summarize(samples_ms: list[float]) -> dict:
    return {
        "n": len(samples_ms),
        "p50_ms": round(percentile(samples_ms, 50), 3),
        "p95_ms": round(percentile(samples_ms, 95), 3),
        "p99_ms": round(percentile(samples_ms, 99), 3),
        "mean_ms": round(statistics.fmean(samples_ms), 3) if samples_ms else None,
    }


@contextmanager
def timer():
    """`with timer() as elapsed: ...` then `elapsed()` gives milliseconds."""
    start = time.perf_counter()
    end = None

    def elapsed() -> float:
        return ((end or time.perf_counter()) - start) * 1000

    try:
        yield elapsed
    finally:
        end = time.perf_counter()


def measure(fn, *, repeat: int, warmup: int = 5) -> dict:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return summarize(samples)


def machine_reference_ms() -> float:
    """Median time of a fixed pure-Python workload (arithmetic, dict building, JSON).

    The shared 2-core machines here run the same code up to ~1.6x slower at some times than
    at others; printing this beside a run says which kind of period it was measured in.
    """
    import gc

    samples = []
    enabled = gc.isenabled()
    gc.disable()  # A process holding a model has a large heap: collections would dominate.
    try:
        for _ in range(5):
            start = time.perf_counter()
            total = 0
            for i in range(1_000_000):
                total += i * i % 7
            json.loads(json.dumps({str(i): i for i in range(100_000)}))
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        if enabled:
            gc.enable()
    return round(statistics.median(samples), 1)


def write_json(path: str | None, payload: dict) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)


def print_table(title: str, rows: list[tuple[str, dict]]) -> None:
    print(f"\n{title}")
    print(f"{'case':<48} {'n':>6} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9}")
    for name, stats in rows:
        p50, p95, p99 = stats["p50_ms"], stats["p95_ms"], stats["p99_ms"]
        print(f"{name:<48} {stats['n']:>6} {p50:>9.3f} {p95:>9.3f} {p99:>9.3f}")
