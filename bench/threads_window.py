"""History window latency on a long thread with regeneration branches.

    python -m bench.threads_window                         # 100,000 messages, 200 regenerations
    python -m bench.threads_window --messages 20000 --branches 40
    python -m bench.threads_window --json var/threads_window.json

Target (issue 3): window p95 <= 15 ms server-side for a 100,000-message thread with 200
regeneration branches; the window must not load the whole thread.

The thread is built through `thread_append_messages` (batches of 500), so token counts,
depths and jump pointers are computed exactly as in production. Every
messages/branches-th turn, the assistant answer is regenerated (a sibling answer whose
parent is the user message) and the conversation continues on the new branch.
"""

import argparse
import json
import random
import time
import uuid

from bench.harness import measure, print_table, setup_django, summarize, write_json
from bench.threads_cpu import cpu_meter, load_average

SENTENCES = [
    "Can you check the flight to Lisbon on 14 May?",
    "The meeting with Dana moved to Thursday at 10:30.",
    "I prefer window seats and vegetarian meals.",
    "Summarize the quarterly report in three bullet points.",
    "What did we decide about the Berlin office budget?",
    "Remind me to call the plumber tomorrow morning.",
    "The invoice total was 1,240 euros including VAT.",
    "Let's go with the second option, it is cheaper.",
]


def build(*, n_messages: int, n_branches: int, seed: int = 3):
    from core.services import agent_get_or_create, workspace_create
    from threads.services import thread_append_messages, thread_create

    rng = random.Random(seed)
    workspace = workspace_create(name=f"bench-window-{seed}-{time.time_ns()}")
    agent = agent_get_or_create(workspace=workspace, slug="bench")
    thread = thread_create(workspace=workspace, agent=agent, title="long")
    # Regenerate the assistant answer at n_branches evenly spaced assistant turns (odd indices).
    step = max(4, n_messages // (n_branches + 1))
    regen_points = {(k * step) | 1 for k in range(1, n_branches + 1)}
    stored = 0
    batch: list[dict] = []
    abandoned = []
    previous_id = None
    started = time.perf_counter()
    for index in range(n_messages):
        message_id = uuid.uuid4()
        role = "user" if index % 2 == 0 else "assistant"
        batch.append({"id": str(message_id), "role": role, "content": " ".join(rng.sample(SENTENCES, 2))})
        if index in regen_points:
            stored += len(thread_append_messages(thread=thread, messages=batch))
            batch = []
            # The old answer becomes an abandoned branch; the conversation continues on the new one.
            abandoned.append(message_id)
            regen = {
                "role": "assistant",
                "content": "Regenerated: " + SENTENCES[0],
                "parent": str(previous_id),
            }
            stored += len(thread_append_messages(thread=thread, messages=[regen]))
        elif len(batch) >= 500:
            stored += len(thread_append_messages(thread=thread, messages=batch))
            batch = []
        previous_id = message_id
    if batch:
        stored += len(thread_append_messages(thread=thread, messages=batch))
    build_seconds = time.perf_counter() - started
    return workspace, agent, thread, abandoned, stored, build_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--branches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--json")
    args = parser.parse_args()
    setup_django()

    from django.db import connection
    from rest_framework.test import APIClient

    from core.services import api_key_create
    from threads.models import Message, Thread
    from threads.selectors import message_history_window

    workspace, agent, thread, abandoned, stored, build_seconds = build(
        n_messages=args.messages, n_branches=args.branches
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE threads_message")
    thread = Thread.objects.select_related("agent", "workspace").get(pk=thread.pk)
    leaf = Message.objects.filter(thread=thread).order_by("-seq").first()
    print(
        f"built {stored} messages ({len(abandoned)} regenerations, branch depth {leaf.depth}) "
        f"in {build_seconds:.1f} s ({stored / build_seconds:,.0f} msg/s through the service)"
    )

    with cpu_meter() as cpu_used:
        for _ in range(args.repeat):
            message_history_window(thread=thread)
    django_cpu, postgres_cpu = cpu_used()
    print(
        f"CPU per default window: Django {django_cpu / args.repeat * 1000:.2f} ms + PostgreSQL "
        f"{postgres_cpu / args.repeat * 1000:.2f} ms (load average {load_average():.1f})"
    )
    rows = []
    rows.append(
        (
            "window, newest leaf, defaults (20 msg / 2000 tok)",
            measure(lambda: message_history_window(thread=thread), repeat=args.repeat),
        )
    )
    rows.append(
        (
            "window, 200 msg / 20000 tok",
            measure(
                lambda: message_history_window(thread=thread, max_messages=200, max_tokens=20_000),
                repeat=args.repeat,
            ),
        )
    )
    rng = random.Random(1)
    rows.append(
        (
            "window at a random abandoned branch leaf",
            measure(
                lambda: message_history_window(thread=thread, leaf=rng.choice(abandoned)), repeat=args.repeat
            ),
        )
    )
    rows.append(
        (
            "window with delegation filter",
            measure(lambda: message_history_window(thread=thread, delegation="d-1"), repeat=args.repeat),
        )
    )

    # A summary covering all but the newest 300 messages: the window checks, through jump
    # pointers, that it lies on the branch (O(log n) steps).
    covered = Message.objects.filter(thread=thread, depth=leaf.depth - 300).order_by("-seq").first()
    from threads.lib.tree import ancestor_at_depth

    covered_id = ancestor_at_depth(start_id=leaf.pk, target_depth=leaf.depth - 300)
    covered = Message.objects.get(pk=covered_id)
    Thread.objects.filter(pk=thread.pk).update(
        summary="Dana moved the meeting; budget decided; window seats.",
        summary_upto_id=covered.pk,
        summary_upto_depth=covered.depth,
        summary_tokens=20,
        summary_covers_tokens=covered.branch_tokens,
    )
    thread = Thread.objects.select_related("agent", "workspace").get(pk=thread.pk)
    assert message_history_window(thread=thread).summary_applied
    rows.append(
        (
            "window with summary (ancestor check)",
            measure(lambda: message_history_window(thread=thread), repeat=args.repeat),
        )
    )
    root_summary = Message.objects.filter(thread=thread, depth=1).first()
    Thread.objects.filter(pk=thread.pk).update(summary_upto_id=root_summary.pk, summary_upto_depth=1)
    thread = Thread.objects.select_related("agent", "workspace").get(pk=thread.pk)
    rows.append(
        (
            "window with summary near the root (deep check)",
            measure(lambda: message_history_window(thread=thread), repeat=args.repeat),
        )
    )

    # The statement's own execution time and buffer reads, as PostgreSQL reports them: the
    # window reads a few hundred 8 kB pages whatever the thread's size.
    from django.conf import settings as django_settings

    from threads.selectors import _window_sql

    sql, params = _window_sql(
        thread=thread,
        leaf=None,
        scope="",
        summary_id=thread.summary_upto_id,
        summary_depth=thread.summary_upto_depth,
        limit=django_settings.MEMORY_DEFAULTS["recent_messages"] + 32,
        delegation=None,
    )
    executions, buffers = [], []
    with connection.cursor() as cursor:
        for _ in range(100):
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]
            executions.append(plan["Execution Time"])
            buffers.append(
                plan["Plan"].get("Shared Hit Blocks", 0) + plan["Plan"].get("Shared Read Blocks", 0)
            )
    rows.append(("  its SQL statement alone (EXPLAIN ANALYZE)", summarize(executions)))
    print(f"the window statement touched at most {max(buffers)} buffers (8 kB pages)")
    print_table(
        f"History window (selector, server-side), {stored:,} messages, {len(abandoned)} branches", rows
    )
    _key, secret = api_key_create(workspace=workspace)
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    url = f"/api/v1/threads/{thread.pk}/history/"

    def via_api():
        response = client.get(url)
        assert response.status_code == 200, response.content

    api_row = ("GET /history/ (Django test client, auth + JSON)", measure(via_api, repeat=args.repeat))
    print_table("History window through the API", [api_row])
    rows.append(api_row)
    write_json(
        args.json,
        {
            "messages": stored,
            "branches": len(abandoned),
            "build_seconds": round(build_seconds, 1),
            "results": dict(rows),
        },
    )


if __name__ == "__main__":
    main()
