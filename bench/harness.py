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
from dataclasses import dataclass


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


def autovacuum_report(cursor, *, tables: list[str] | None = None) -> dict:
    """How often autovacuum vacuumed and analyzed each of `tables` (default: every table of
    more than 10,000 rows) of the cursor's database, and when it last vacuumed it: whether it
    ran beside a benchmark's measures."""
    where = "relname = ANY(%s)" if tables is not None else "n_live_tup > 10000"
    cursor.execute(
        "SELECT relname, autovacuum_count, autoanalyze_count, last_autovacuum::text "
        f"FROM pg_stat_user_tables WHERE {where} ORDER BY relname",
        [list(tables)] if tables is not None else [],
    )
    return {
        name: {"vacuums": vacuums, "analyzes": analyzes, "last": last}
        for name, vacuums, analyzes, last in cursor.fetchall()
    }


def write_json(path: str | None, payload: dict) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)


def print_table(title: str, rows: list[tuple[str, dict]]) -> None:
    """The rows' p50/p95/p99, and the CPU per call when measured (measure_cpu)."""
    cpu = any("cpu_ms" in stats for _, stats in rows)
    print(f"\n{title}")
    print(
        f"{'case':<48} {'n':>6} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9}"
        + (f" {'CPU ms':>8}" if cpu else "")
    )
    for name, stats in rows:
        p50, p95, p99 = stats["p50_ms"], stats["p95_ms"], stats["p99_ms"]
        line = f"{name:<48} {stats['n']:>6} {p50:>9.3f} {p95:>9.3f} {p99:>9.3f}"
        if cpu:
            line += f" {stats['cpu_ms']:>8.1f}" if "cpu_ms" in stats else f" {'':>8}"
        print(line)


# The /memories page benchmarks (bench/browser_*.py): each loads its rows, logs a client in and
# times GETs through Django's test client (session, middleware, access check, selectors and
# templates: the whole server-side path, no network).


@dataclass(frozen=True)
class PageCase:
    """One timed GET of `path`: the full page, or the htmx partial of HX-Target `target`;
    `fragments` are (label, HX-Target) pairs of the same path also timed as htmx requests."""

    name: str
    path: str
    target: str | None = None
    fragments: tuple[tuple[str, str], ...] = ()


def browser_parser(doc: str, *, size_flag: str = "--rows", default: int = 100_000, help: str = ""):
    """The page benchmarks' command line: the size, `--repeat` and `--json`."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(size_flag, type=int, default=default, help=help or f"default {default:,}")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", default=None)
    return parser


def browser_setup() -> None:
    """setup_django, and the test client's host allowed."""
    setup_django()
    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]


def print_loaded(what: str, started: float, timings: dict) -> None:
    print(
        f"loaded {what} in {time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
    )


def logged_in_client(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def page_get(client, path: str, target: str | None = None):
    """GET `path` (as htmx with HX-Target `target` when given), reading a streamed body whole."""
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target} if target else {}
    response = client.get(path, **headers)
    if response.streaming:
        b"".join(response.streaming_content)
    return response


def measure_cpu(fn, *, repeat: int, warmup: int = 5) -> dict:
    """`measure`, plus the CPU the calls used: this process's and the PostgreSQL backend's of
    this connection (bench.threads_cpu), per call. On a shared machine a wall time waits for a
    core as well; the CPU time is what the request costs, whatever the load."""
    from bench.threads_cpu import cpu_meter

    for _ in range(warmup):
        fn()
    with cpu_meter() as used:
        stats = measure(fn, repeat=repeat, warmup=0)
    django_s, postgres_s = used()
    stats["cpu_ms"] = round((django_s + postgres_s) * 1000 / repeat, 1)
    stats["postgres_cpu_ms"] = round(postgres_s * 1000 / repeat, 1)
    return stats


def measure_pages(
    client, cases, *, repeat: int, check=None, page_suffix: str = " (page)"
) -> tuple[list, dict]:
    """Time every case, then each of its fragments (wall and CPU, see measure_cpu).
    `check(case, response)` runs on one untimed response of each case first (status 200 is
    always checked). Returns the table rows and {case name: {"page": stats, <label>: stats}}."""
    rows, results = [], {}
    for case in cases:
        response = page_get(client, case.path, case.target)
        assert response.status_code == 200, (case.path, response.status_code)
        if check is not None:
            check(case, response)
        stats = measure_cpu(lambda case=case: page_get(client, case.path, case.target), repeat=repeat)
        rows.append((f"{case.name}{page_suffix}", stats))
        results[case.name] = {"page": stats}
        for label, target in case.fragments:
            stats = measure_cpu(
                lambda path=case.path, target=target: page_get(client, path, target), repeat=repeat
            )
            rows.append((f"{case.name} ({label})", stats))
            results[case.name][label] = stats
    return rows, results


def load_line(before, after) -> str:
    return f"load average (1/5/15 min) before: {before}, after: {after} on {os.cpu_count()} cores"


def verdict(label: str, value_ms: float, target_ms: float) -> str:
    line = f"{label}: {value_ms:.1f} ms -> {'PASS' if value_ms <= target_ms else 'FAIL'}"
    print(line)
    return line


def measure_against(fn, reference, *, repeat: int, warmup: int = 5) -> dict:
    """Time `fn` and `reference` alternately, so both see the same load, and give their ratio:
    on a shared machine the ratio of p50s moves far less than either time."""
    for _ in range(warmup):
        fn()
        reference()
    samples, reference_samples = [], []
    for _ in range(repeat):
        for call, into in ((fn, samples), (reference, reference_samples)):
            start = time.perf_counter()
            call()
            into.append((time.perf_counter() - start) * 1000)
    stats, ref = summarize(samples), summarize(reference_samples)
    return {**stats, "reference": ref, "ratio_p50": round(stats["p50_ms"] / ref["p50_ms"], 2)}
