"""Checkpoint put + get latest with a million stored checkpoints, through the REST API.

    python -m bench.checkpoints_put_get                         # 1,000,000 checkpoints, 10,000 threads
    python -m bench.checkpoints_put_get --checkpoints 200000 --threads 2000
    python -m bench.checkpoints_put_get --json var/checkpoints.json

Target (issue 3): checkpoint put + get latest p95 <= 10 ms with 1,000,000 stored
checkpoints. The rows are bulk-loaded with COPY (256-byte state blobs, LangGraph-style
time-ordered ids, a few pending writes), then ANALYZEd. Requests go through Django's test
client: middleware, API-key authentication, scoping, JSON and base64, no network socket.
Also timed: a thread's list before a checkpoint, pending writes, and the list across threads
by metadata (LangGraph's `list(None, filter=...)`).
"""

import argparse
import base64
import json
import os
import random
import time
import uuid

from bench.harness import measure, print_table, setup_django, summarize, write_json
from bench.threads_cpu import cpu_meter, load_average


def checkpoint_id(n: int) -> str:
    # Sortable like LangGraph's UUID v6 ids: the newest checkpoint has the greatest id.
    return f"1ef{n:013x}-0000-6000-8000-000000000000"


def build(*, n_checkpoints: int, n_threads: int):
    from django.db import connection
    from django.utils import timezone

    from core.services import agent_get_or_create, workspace_create
    from threads.models import Thread

    workspace = workspace_create(name=f"bench-checkpoints-{time.time_ns()}")
    agent = agent_get_or_create(workspace=workspace, slug="graph")
    threads = Thread.objects.bulk_create(
        [Thread(workspace=workspace, agent=agent, client_key=f"lg-{i}") for i in range(n_threads)],
        batch_size=2000,
    )
    per_thread = n_checkpoints // n_threads
    blob = os.urandom(256)
    now = timezone.now()
    started = time.perf_counter()
    columns = (
        "id, workspace_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
        "type, data, metadata, created_at, updated_at"
    )
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY checkpoints_checkpoint ({columns}) FROM STDIN") as copy:
            for t_index, thread in enumerate(threads):
                for step in range(per_thread):
                    n = t_index * per_thread + step
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            workspace.pk,
                            thread.pk,
                            "",
                            checkpoint_id(n),
                            checkpoint_id(n - 1) if step else None,
                            "msgpack",
                            blob,
                            json.dumps({"source": "loop" if step else "input", "step": step}),
                            now,
                            now,
                        )
                    )
        cursor.execute("ANALYZE checkpoints_checkpoint")
    load_seconds = time.perf_counter() - started
    return workspace, threads, per_thread, load_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--json")
    args = parser.parse_args()
    setup_django()

    from rest_framework.test import APIClient

    from checkpoints.models import Checkpoint
    from core.services import api_key_create

    workspace, threads, per_thread, load_seconds = build(
        n_checkpoints=args.checkpoints, n_threads=args.threads
    )
    stored = Checkpoint.objects.count()
    print(f"loaded {stored:,} checkpoints over {len(threads):,} threads in {load_seconds:.1f} s (COPY)")

    _key, secret = api_key_create(workspace=workspace)
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    rng = random.Random(11)
    counter = [args.checkpoints * 2]
    blob = base64.b64encode(os.urandom(256)).decode()
    put_samples, latest_samples, pair_samples = [], [], []

    def put_and_latest():
        thread = rng.choice(threads)
        counter[0] += 1
        body = {
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id(counter[0]),
            "parent_checkpoint_id": None,
            "checkpoint": {"type": "msgpack", "data": blob},
            "metadata": {"source": "loop", "step": counter[0]},
        }
        url = f"/api/v1/threads/{thread.pk}/checkpoints/"
        t0 = time.perf_counter()
        put = client.put(url, body, format="json")
        t1 = time.perf_counter()
        latest = client.get(url + "latest/")
        t2 = time.perf_counter()
        assert put.status_code == 201, put.content[:300]
        assert latest.json()["checkpoint_id"] == body["checkpoint_id"]
        put_samples.append((t1 - t0) * 1000)
        latest_samples.append((t2 - t1) * 1000)
        pair_samples.append((t2 - t0) * 1000)

    for _ in range(20):
        put_and_latest()
    put_samples.clear()
    latest_samples.clear()
    pair_samples.clear()
    with cpu_meter() as cpu_used:
        for _ in range(args.repeat):
            put_and_latest()
    django_cpu, postgres_cpu = cpu_used()
    cpu_per_pair_ms = (django_cpu + postgres_cpu) / args.repeat * 1000
    print(
        f"CPU per PUT + GET latest: Django {django_cpu / args.repeat * 1000:.2f} ms + PostgreSQL "
        f"{postgres_cpu / args.repeat * 1000:.2f} ms = {cpu_per_pair_ms:.2f} ms "
        f"(load average {load_average():.1f})"
    )

    def list_before():
        thread = rng.choice(threads)
        response = client.get(
            f"/api/v1/threads/{thread.pk}/checkpoints/",
            {"checkpoint_ns": "", "limit": 10, "before": checkpoint_id(rng.randrange(args.checkpoints))},
        )
        assert response.status_code == 200

    def list_by_metadata():
        # LangGraph's `list(None, filter=...)`: across the workspace's threads, a pair one
        # checkpoint a thread carries (checkpoints 0002's GIN index reads the matches).
        response = client.get(
            "/api/v1/checkpoints/", {"metadata": json.dumps({"step": rng.randrange(per_thread)}), "limit": 10}
        )
        assert response.status_code == 200
        assert response.json()["count"] >= len(threads)

    def put_writes():
        thread = rng.choice(threads)
        index = threads.index(thread)
        target = checkpoint_id(index * per_thread + per_thread - 1)
        body = {
            "task_id": f"task-{rng.randrange(10**9)}",
            "task_path": "~__pregel_pull, agent",
            "writes": [
                {"idx": i, "channel": "messages", "value": {"type": "json", "data": blob}} for i in range(3)
            ],
        }
        response = client.put(
            f"/api/v1/threads/{thread.pk}/checkpoints/{target}/writes/", body, format="json"
        )
        assert response.status_code == 200, response.content[:300]

    # Server-side: the same selector and service calls the views make, without HTTP.
    from checkpoints.selectors import checkpoint_latest
    from checkpoints.services import checkpoint_put

    raw_blob = base64.b64decode(blob)

    def service_put_and_latest():
        thread = rng.choice(threads)
        counter[0] += 1
        checkpoint_put(
            thread=thread,
            checkpoint_id=checkpoint_id(counter[0]),
            type="msgpack",
            data=raw_blob,
            metadata={"source": "loop"},
        )
        latest = checkpoint_latest(thread=thread)
        list(latest.writes.all())

    # Calibration: the cheapest authenticated API call on this machine at this moment.
    def agents_get():
        assert client.get("/api/v1/agents/graph/").status_code == 200

    with cpu_meter() as calibration_cpu:
        for _ in range(200):
            agents_get()
    django_cal, postgres_cal = calibration_cpu()
    print(
        f"CPU per calibration GET: Django {django_cal / 200 * 1000:.2f} ms + PostgreSQL "
        f"{postgres_cal / 200 * 1000:.2f} ms"
    )

    rows = [
        ("PUT checkpoint", summarize(put_samples)),
        ("GET latest (with pending writes)", summarize(latest_samples)),
        ("PUT + GET latest", summarize(pair_samples)),
        ("GET list (before, limit 10)", measure(list_before, repeat=200)),
        ("GET list across threads by metadata (limit 10)", measure(list_by_metadata, repeat=100)),
        ("PUT writes (3 writes)", measure(put_writes, repeat=200)),
        ("server-side put + latest (services, no HTTP)", measure(service_put_and_latest, repeat=args.repeat)),
        ("calibration: GET /api/v1/agents/{slug}/", measure(agents_get, repeat=200)),
    ]
    print_table(f"Checkpoints through the API, {stored:,} stored", rows)
    write_json(
        args.json,
        {
            "checkpoints": stored,
            "threads": len(threads),
            "load_seconds": round(load_seconds, 1),
            "cpu_ms_per_put_and_latest": round(cpu_per_pair_ms, 3),
            "results": dict(rows),
        },
    )


if __name__ == "__main__":
    main()
