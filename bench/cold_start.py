"""Cold start of a web process: how long until /readyz is 200, and the first search against the 100th.

Starts gunicorn exactly as `manage.py serve` does (its `_children` "web" command), twice per
round: "cold" without memory_project/gunicorn.conf.py (no warm-up: the model loads on the
first search, as before issue 18) and "warm" with it. For each it times, from the spawn,
the first answer of /readyz and its first 200; then sends `--requests` episodic searches one
after another, each on a new connection (so they spread over the workers as separate
agents' requests would) and reports the first, the slowest of the first `--workers` (each
worker's first, if the balancing were even), the median of the rest and the last, and
the first/last ratio. The stop (SIGTERM to exit) is timed too.

    python -m bench.cold_start [--rounds 2] [--requests 100] [--json bench-cold.json]

A throwaway PostgreSQL and Valkey back it; no Celery worker runs: a heartbeat row stands in
for one, so /readyz measures the web processes only. Print `uptime` beside the figures: the
2 shared cores make every start slower when something else runs.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.harness import machine_reference_ms, write_json

BASE_DIR = Path(__file__).resolve().parent.parent
CONFIG_FLAG = "--config="
QUERY = "what did we decide about the release date?"


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _web_command(port: int, workers: int, *, warm: bool) -> list[str]:
    """serve's own gunicorn command line, without its --config for the cold variant."""
    from core.management.commands.serve import Command

    options = {
        "host": "127.0.0.1",
        "port": port,
        "mcp_port": 0,
        "web_workers": workers,
        "worker_concurrency": 1,
        "keep_alive": 30,
    }
    spec = next(spec for spec in Command()._children(options, dict(os.environ)) if spec.name == "web")
    return [arg for arg in spec.command if warm or not arg.startswith(CONFIG_FLAG)]


def _seed() -> dict:
    from core.services import agent_register, api_key_create, workspace_create
    from identities.services import memory_user_create

    workspace = workspace_create(name="cold-start")
    agent = agent_register(workspace=workspace, slug="bench")
    person = memory_user_create(workspace=workspace, canonical_id="bench-person")
    _, secret = api_key_create(workspace=workspace, name="bench")
    return {"key": secret, "agent": agent.slug, "memory_user": str(person.pk)}


def _heartbeat() -> None:
    """A worker heartbeat younger than WORKER_HEARTBEAT_MAX_AGE_SECONDS: /readyz needs one."""
    from core.services import worker_heartbeat_record

    worker_heartbeat_record(worker="bench-cold-start")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_variant(
    *, warm: bool, seed: dict, env: dict, workers: int, requests: int, probe_interval: float, log_dir: Path
) -> dict:
    _heartbeat()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    name = "warm" if warm else "cold"
    log = open(log_dir / f"{name}-{port}.log", "w")  # noqa: SIM115 - closed below
    load_before = _load()
    started = time.monotonic()
    process = subprocess.Popen(
        _web_command(port, workers, warm=warm),
        cwd=BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    first_answer = ready = None
    reasons_seen: set[str] = set()
    try:
        while ready is None:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {process.returncode}; see {log.name}")
            if time.monotonic() - started > 300:
                raise RuntimeError(f"/readyz not 200 within 300 s; reasons {reasons_seen}")
            try:
                response = httpx.get(f"{url}/readyz", timeout=5)
            except httpx.HTTPError:
                time.sleep(0.1)  # not listening yet
                continue
            now = time.monotonic() - started
            first_answer = first_answer if first_answer is not None else now
            if response.status_code == 200:
                ready = now
            else:
                reasons_seen.update(response.json().get("reasons", []))
                time.sleep(probe_interval)

        body = {"agent": seed["agent"], "memory_user": seed["memory_user"], "query": QUERY}
        headers = {"Authorization": f"Bearer {seed['key']}"}
        samples = []
        for _ in range(requests):
            t = time.perf_counter()
            # A new connection each: keep-alive would pin every request to one worker.
            response = httpx.post(
                f"{url}/api/v1/episodic-entries/search/", json=body, headers=headers, timeout=120
            )
            samples.append((time.perf_counter() - t) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"search answered {response.status_code}: {response.text[:300]}")
        first_search_done = time.monotonic() - started - sum(samples[1:]) / 1000
    finally:
        stop_started = time.monotonic()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        stopped_in = time.monotonic() - stop_started
        log.close()
    rest = samples[workers:] or samples
    return {
        "variant": name,
        "load_before": load_before,
        "load_after": _load(),
        "first_answer_s": round(first_answer, 2),
        "readyz_200_s": round(ready, 2),
        "reasons_seen": sorted(reasons_seen),
        "first_search_answered_s": round(first_search_done, 2),
        "first_ms": round(samples[0], 1),
        "first_per_worker_max_ms": round(max(samples[:workers]), 1),
        "rest_p50_ms": round(statistics.median(rest), 1),
        "last_ms": round(samples[-1], 1),
        "first_over_last": round(samples[0] / samples[-1], 1),
        "first_over_p50": round(samples[0] / statistics.median(rest), 1),
        "stop_s": round(stopped_in, 2),
    }


def print_report(results: list[dict]) -> None:
    columns = (
        "variant",
        "readyz_200_s",
        "first_search_answered_s",
        "first_ms",
        "first_per_worker_max_ms",
        "rest_p50_ms",
        "last_ms",
        "first_over_last",
        "first_over_p50",
        "stop_s",
        "load_before",
    )
    print(" | ".join(columns))
    for result in results:
        print(" | ".join(str(result[column]) for column in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (serve: --web-workers 2)")
    parser.add_argument("--only", choices=["cold", "warm"], help="Run one variant only.")
    parser.add_argument(
        "--probe-interval",
        type=float,
        default=1.0,
        help="Seconds between /readyz probes while not ready (each probe costs the warming process CPU).",
    )
    parser.add_argument("--json", help="Write the figures here.")
    args = parser.parse_args()

    from bench.gunicorn_workers import Servers

    root = Path(tempfile.mkdtemp(prefix="memory-bench-cold-"))
    servers = Servers(root)
    env = {**servers.env, "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    import django

    django.setup()
    import logging

    from django.core.management import call_command

    # Django's logging config reports every httpx request at INFO: hundreds of lines here.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    call_command("migrate", interactive=False, verbosity=0)
    seed = _seed()
    reference = machine_reference_ms()
    results = []
    try:
        for _ in range(args.rounds):
            for warm in (False, True):
                if args.only and args.only != ("warm" if warm else "cold"):
                    continue
                results.append(
                    run_variant(
                        warm=warm,
                        seed=seed,
                        env=env,
                        workers=args.workers,
                        requests=args.requests,
                        probe_interval=args.probe_interval,
                        log_dir=root,
                    )
                )
                print_report(results[-1:])
    finally:
        servers.stop()
    print()
    print(f"machine reference {reference:.1f} ms; load average now {_load()}; logs in {root}")
    print_report(results)
    if args.json:
        write_json(args.json, {"machine_reference_ms": reference, "results": results})


if __name__ == "__main__":
    sys.exit(main())
