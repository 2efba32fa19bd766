"""The /memories context preview page at scale: what POST /api/v1/context/ would return,
explained, for a person with much memory and one with little.

    python -m bench.browser_context_preview                  # 100,000 rows per tier
    python -m bench.browser_context_preview --rows 20000     # smaller
    python -m bench.browser_context_preview --json var/browser_context_preview.json

Target (issue 15): every /memories page's first page renders in <= 150 ms server-side (p95)
with 100,000 rows per tier.

Data: bench.browser_tabs.build's 100,000 rows per tier table (facts, entries, episodes,
threads, checkpoints, procedures, memory users), plus one heavy person built as
bench.context_assembly does (`--facts` facts, a `--messages`-message thread appended through
the thread service, `--procedures` procedures of which a tenth fire on "refund", a plan).
The light person is one of the tier rows' memory users. Each case is a GET through Django's
test client as a logged-in editor: the full page (agent, person, thread, message, budget)
and the htmx fragment (`HX-Target: preview-results`), which builds the same context.
The context is built by runtime's context_build(explain=True) in a rolled-back read-only
transaction, including the query embedding of the message by the local model.
"""

import gc
import os
import random
import time
from contextlib import contextmanager
from urllib.parse import urlencode

from bench.harness import (
    PageCase,
    browser_parser,
    browser_setup,
    load_line,
    logged_in_client,
    machine_reference_ms,
    measure_pages,
    print_loaded,
    print_table,
    verdict,
    write_json,
)

TARGET_MS = 150.0
MESSAGE = "Can you refund my order from last week?"


@contextmanager
def gc_pauses():
    """Each garbage collection's (generation, ms) while the block runs: with a large heap (the
    embedding model, the loaded rows) a full collection is a pause of its own in a request."""
    pauses, started = [], []

    def callback(phase, info):
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            pauses.append((info["generation"], (time.perf_counter() - started[0]) * 1000))

    gc.callbacks.append(callback)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(callback)


def gc_objects() -> int:
    return len(gc.get_objects())


def build(n_rows: int, *, n_facts: int, n_messages: int, n_procedures: int):
    from bench.browser_tabs import build as build_tiers
    from bench.context_assembly import build_facts, build_procedures, build_thread
    from core.models import Membership
    from core.services import operator_create
    from identities.services import memory_user_identify
    from threads.services import thread_create, thread_plan_set

    rng = random.Random(13)
    workspace, _viewer, agents, users_in, threads_in, timings = build_tiers(n_rows)
    editor = operator_create(
        workspace=workspace, username=f"editor-{workspace.pk}", password="x" * 12, role=Membership.Role.EDITOR
    ).user
    agent = agents[0]
    person = memory_user_identify(
        workspace=workspace, channel="telegram", external_id="4242", profile={"name": "Ada"}
    ).memory_user
    thread = thread_create(workspace=workspace, agent=agent, memory_user=person)
    started = time.perf_counter()
    build_thread(thread=thread, n_messages=n_messages, rng=rng)
    build_facts(workspace=workspace, person=person, thread=thread, n_facts=n_facts, rng=rng)
    build_procedures(workspace=workspace, agent=agent, n=n_procedures, rng=rng)
    thread_plan_set(thread=thread, plan={"goal": "plan the trip", "steps": ["flights", "hotel", "dinner"]})
    timings["heavy_person"] = time.perf_counter() - started
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return workspace, editor, agent, person, thread, users_in[-1], timings


def cases(workspace, agent, heavy, heavy_thread, light):
    base = f"/memories/{workspace.pk}/context/"

    def url(**params):
        return (
            base + "?" + urlencode({"agent": agent.slug, "message": MESSAGE, "token_budget": 4000, **params})
        )

    fragment = (("fragment", "preview-results"),)
    return [
        PageCase("form only (no preview)", base),
        PageCase(
            "heavy person + thread", url(memory_user=heavy.pk, thread=heavy_thread.pk), fragments=fragment
        ),
        PageCase("heavy person, no thread", url(memory_user=heavy.pk), fragments=fragment),
        PageCase(
            "heavy person, budget 32k", url(memory_user=heavy.pk, token_budget=32000), fragments=fragment
        ),
        PageCase("light person, no thread", url(memory_user=light.pk), fragments=fragment),
    ]


def main():
    parser = browser_parser(__doc__, help="rows per tier table (default 100,000)")
    parser.add_argument("--facts", type=int, default=10_000, help="the heavy person's facts")
    parser.add_argument("--messages", type=int, default=2_000, help="the heavy person's thread")
    parser.add_argument("--procedures", type=int, default=200)
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.collect() and gc.freeze() after loading, as a server would after start-up",
    )
    args = parser.parse_args()

    browser_setup()
    started = time.perf_counter()
    workspace, editor, agent, heavy, thread, light, timings = build(
        args.rows, n_facts=args.facts, n_messages=args.messages, n_procedures=args.procedures
    )
    print_loaded(f"{args.rows:,} rows per tier and the heavy person", started, timings)
    client = logged_in_client(editor)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()

    def check(case, response):
        if "?" in case.path:
            assert b"of 4,000 tokens" in response.content or b"of 32,000 tokens" in response.content, (
                case.path
            )

    reference_before = machine_reference_ms()
    load_before = os.getloadavg()
    with gc_pauses() as pauses:
        rows, results = measure_pages(
            client, cases(workspace, agent, heavy, thread, light), repeat=args.repeat, check=check
        )
    load_after = os.getloadavg()
    reference_after = machine_reference_ms()
    print_table(
        f"/memories context preview, {args.rows:,} rows per tier (target p95 <= {TARGET_MS:.0f} ms)", rows
    )
    print(load_line(load_before, load_after))
    print(f"machine reference: {reference_before} ms before, {reference_after} ms after")
    full = [ms for generation, ms in pauses if generation == 2]
    print(
        f"full garbage collections while measuring: {len(full)}, "
        f"{', '.join(f'{ms:.0f}' for ms in full) or 'none'} ms ({gc_objects()} objects tracked)"
    )
    worst = max(stats["p95_ms"] for _, stats in rows)
    verdict("worst p95", worst, TARGET_MS)
    write_json(
        args.json,
        {
            "rows_per_tier": args.rows,
            "scale": vars(args),
            "target_ms": TARGET_MS,
            "cores": os.cpu_count(),
            "cases": results,
            "worst_p95_ms": worst,
            "load_average": [load_before, load_after],
            "machine_reference_ms": [reference_before, reference_after],
            "full_gc_pauses_ms": full,
        },
    )


if __name__ == "__main__":
    main()
