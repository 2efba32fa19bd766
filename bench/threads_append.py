"""Message append throughput end to end through the REST API.

    python -m bench.threads_append                      # 10,000 messages in batches of 50
    python -m bench.threads_append --messages 50000 --batch 100
    python -m bench.threads_append --json var/threads_append.json
    python -m bench.threads_append --search-index-rounds 3 --preload 100000

Target (issue 3): appending 10,000 messages in batches of 50 >= 2,000 messages/s end to end
through the API. Requests go through Django's test client (the full middleware, API-key
authentication, JSON parsing, validation, token counting, the transaction and JSON
rendering; no network socket), one after another on one connection, as one agent would.

`--search-index-rounds N` measures what the GIN index on the messages' tsvector
(threads_message_search, threads migration 0006) costs an append: N pairs of rounds in one
process, each pair one round without the index and one with it (the order alternating from
pair to pair, so a slower period of the shared machine falls on both), every round
`--messages` messages into a new thread of the same agent. `--preload` first fills the table
(the index then has that many messages' lexemes). A round with the index includes the flushes
of its pending list (gin_pending_list_limit, 4 MB: every few thousand messages).
"""

import argparse
import os
import random
import statistics
import time

from bench.harness import print_table, setup_django, summarize, write_json
from bench.threads_cpu import backend_pid, process_cpu_seconds

SENTENCES = [
    "Can you check the flight to Lisbon on 14 May?",
    "The meeting with Dana moved to Thursday at 10:30.",
    "I prefer window seats and vegetarian meals.",
    "Summarize the quarterly report in three bullet points, and keep the numbers.",
    "What did we decide about the Berlin office budget?",
    "Remind me to call the plumber tomorrow morning.",
]
SEARCH_INDEX = "threads_message_search"


def _bodies(rng, *, messages: int, batch: int, prefix: str) -> list[dict]:
    return [
        {
            "messages": [
                {
                    "role": "user" if (start + i) % 2 == 0 else "assistant",
                    "content": " ".join(rng.sample(SENTENCES, 3)),
                    "idempotency_key": f"{prefix}-{start + i}",
                }
                for i in range(batch)
            ]
        }
        for start in range(0, messages, batch)
    ]


def append_round(client, url: str, bodies: list[dict]) -> dict:
    """Post every body in turn; wall time, CPU of both processes and per-request latency."""
    samples = []
    backend = backend_pid()
    backend_cpu_before = process_cpu_seconds(backend)
    cpu_before = time.process_time()
    started = time.perf_counter()
    for body in bodies:
        t0 = time.perf_counter()
        response = client.post(url, body, format="json")
        samples.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 201, response.content[:500]
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "django_cpu": time.process_time() - cpu_before,
        "postgres_cpu": process_cpu_seconds(backend) - backend_cpu_before,
        "samples": samples,
    }


def _index_sql() -> tuple[str, str]:
    import importlib

    migration = importlib.import_module("threads.migrations.0006_message_search_index")
    return migration.CREATE, migration.DROP


def _set_search_index(present: bool) -> None:
    from django.db import connection

    create, drop = _index_sql()
    with connection.cursor() as cursor:
        cursor.execute(create if present else drop)
        cursor.execute("ANALYZE threads_message")


def _preload(workspace, agent, n: int) -> float:
    """`n` messages over 100 threads, straight into the table (COPY-free bulk insert)."""
    from threads.models import Message, Thread

    rng = random.Random(9)
    start = time.perf_counter()
    threads = Thread.objects.bulk_create(
        [Thread(workspace=workspace, agent=agent, title=f"preload {i}") for i in range(100)]
    )
    rows = [
        Message(
            workspace=workspace,
            thread=threads[i % 100],
            role="user" if i % 2 else "assistant",
            content=" ".join(rng.sample(SENTENCES, 3)),
            seq=i // 100 + 1,
        )
        for i in range(n)
    ]
    Message.objects.bulk_create(rows, batch_size=5000)
    return time.perf_counter() - start


def compare_search_index(args) -> dict:
    from rest_framework.test import APIClient

    from core.services import agent_get_or_create, api_key_create, workspace_create
    from threads.services import thread_create

    rng = random.Random(5)
    workspace = workspace_create(name=f"bench-append-{time.time_ns()}")
    agent = agent_get_or_create(workspace=workspace, slug="bench")
    _key, secret = api_key_create(workspace=workspace)
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    if args.preload:
        print(f"preloaded {args.preload:,} messages in {_preload(workspace, agent, args.preload):.1f} s")
    warm = thread_create(workspace=workspace, agent=agent)
    client.post(
        f"/api/v1/threads/{warm.pk}/messages/",
        _bodies(rng, messages=args.batch, batch=args.batch, prefix="warm")[0],
        format="json",
    )
    rounds = {"without": [], "with": []}
    loads = [os.getloadavg()]
    for pair in range(args.search_index_rounds):
        order = ("without", "with") if pair % 2 == 0 else ("with", "without")
        for kind in order:
            _set_search_index(kind == "with")
            thread = thread_create(workspace=workspace, agent=agent)
            bodies = _bodies(rng, messages=args.messages, batch=args.batch, prefix=f"{pair}-{kind}")
            result = append_round(client, f"/api/v1/threads/{thread.pk}/messages/", bodies)
            result["rate"] = args.messages / result["seconds"]
            rounds[kind].append(result)
            print(
                f"pair {pair + 1} {kind:>7} index: {result['rate']:,.0f} msg/s, "
                f"PostgreSQL CPU {result['postgres_cpu']:.2f} s, Django CPU {result['django_cpu']:.2f} s "
                f"(load {os.getloadavg()[0]:.1f})"
            )
        loads.append(os.getloadavg())
    _set_search_index(True)

    def total(kind, key):
        return sum(r[key] for r in rounds[kind])

    report = {}
    for kind in ("without", "with"):
        samples = [s for r in rounds[kind] for s in r["samples"]]
        report[kind] = {
            "rates": [round(r["rate"]) for r in rounds[kind]],
            "median_rate": round(statistics.median(r["rate"] for r in rounds[kind])),
            "postgres_cpu_seconds": round(total(kind, "postgres_cpu"), 2),
            "django_cpu_seconds": round(total(kind, "django_cpu"), 2),
            "request": summarize(samples),
        }
    # Pairwise: each pair ran back to back, so its ratio is the least disturbed by the machine.
    ratios = [w["rate"] / wo["rate"] for w, wo in zip(rounds["with"], rounds["without"], strict=True)]
    report["rate_ratios_with_over_without"] = [round(r, 3) for r in ratios]
    report["postgres_cpu_ratio"] = round(total("with", "postgres_cpu") / total("without", "postgres_cpu"), 3)
    report["load_average"] = loads
    print_table(
        f"POST /api/v1/threads/{{id}}/messages/, batches of {args.batch}, {args.messages:,} per round",
        [(f"{kind} {SEARCH_INDEX}", report[kind]["request"]) for kind in ("without", "with")],
    )
    print(
        f"throughput with/without the index, per pair: {report['rate_ratios_with_over_without']} "
        f"(median rates {report['with']['median_rate']:,} vs {report['without']['median_rate']:,} msg/s); "
        f"PostgreSQL CPU with/without: {report['postgres_cpu_ratio']}"
    )
    print(f"load average (1/5/15 min) before and after each pair: {loads}")
    return report


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--json")
    parser.add_argument("--search-index-rounds", type=int, default=0)
    parser.add_argument("--preload", type=int, default=0, help="messages stored before the rounds")
    args = parser.parse_args()
    setup_django()

    if args.search_index_rounds:
        report = compare_search_index(args)
        write_json(
            args.json, {"messages": args.messages, "batch": args.batch, "preload": args.preload, **report}
        )
        return

    from rest_framework.test import APIClient

    from core.services import agent_get_or_create, api_key_create, workspace_create
    from threads.models import Message
    from threads.services import thread_create

    rng = random.Random(5)
    workspace = workspace_create(name=f"bench-append-{time.time_ns()}")
    agent = agent_get_or_create(workspace=workspace, slug="bench")
    thread = thread_create(workspace=workspace, agent=agent)
    _key, secret = api_key_create(workspace=workspace)
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    url = f"/api/v1/threads/{thread.pk}/messages/"

    # Warm up: imports, the encoder tables and the connection.
    client.post(url, _bodies(rng, messages=args.batch, batch=args.batch, prefix="warm")[0], format="json")
    bodies = _bodies(rng, messages=args.messages, batch=args.batch, prefix="m")
    result = append_round(client, url, bodies)
    elapsed, python_cpu, backend_cpu = result["seconds"], result["django_cpu"], result["postgres_cpu"]
    stored = Message.objects.filter(thread=thread).count() - args.batch
    assert stored == args.messages, stored
    rate = args.messages / elapsed
    stats = summarize(result["samples"])
    cpu_rate = args.messages / (python_cpu + backend_cpu)
    print(f"\n{args.messages:,} messages in batches of {args.batch}: {elapsed:.2f} s, {rate:,.0f} messages/s")
    print(
        f"CPU used: Django process {python_cpu:.2f} s + PostgreSQL backend {backend_cpu:.2f} s "
        f"= {cpu_rate:,.0f} messages per CPU-second (load average now {os.getloadavg()[0]:.1f})"
    )
    print_table(
        "POST /api/v1/threads/{id}/messages/ (Django test client)", [(f"batch of {args.batch}", stats)]
    )
    write_json(
        args.json,
        {
            "messages": args.messages,
            "batch": args.batch,
            "seconds": round(elapsed, 2),
            "rate": round(rate),
            "cpu_seconds": {"django": round(python_cpu, 2), "postgres": round(backend_cpu, 2)},
            "messages_per_cpu_second": round(cpu_rate),
            "request": stats,
        },
    )


if __name__ == "__main__":
    main()
