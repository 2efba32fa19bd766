"""Message append throughput end to end through the REST API.

    python -m bench.threads_append                      # 10,000 messages in batches of 50
    python -m bench.threads_append --messages 50000 --batch 100
    python -m bench.threads_append --json var/threads_append.json

Target (issue 3): appending 10,000 messages in batches of 50 >= 2,000 messages/s end to end
through the API. Requests go through Django's test client (the full middleware, API-key
authentication, JSON parsing, validation, token counting, the transaction and JSON
rendering; no network socket), one after another on one connection, as one agent would.
"""

import argparse
import os
import random
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--json")
    args = parser.parse_args()
    setup_django()

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

    def batch_body(start: int) -> dict:
        return {
            "messages": [
                {
                    "role": "user" if (start + i) % 2 == 0 else "assistant",
                    "content": " ".join(rng.sample(SENTENCES, 3)),
                    "idempotency_key": f"m-{start + i}",
                }
                for i in range(args.batch)
            ]
        }

    # Warm up: imports, the encoder tables and the connection.
    client.post(url, batch_body(-args.batch), format="json")
    bodies = [batch_body(start) for start in range(0, args.messages, args.batch)]
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
    python_cpu = time.process_time() - cpu_before
    backend_cpu = process_cpu_seconds(backend) - backend_cpu_before
    stored = Message.objects.filter(thread=thread).count() - args.batch
    assert stored == args.messages, stored
    rate = args.messages / elapsed
    stats = summarize(samples)
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
