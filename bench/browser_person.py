"""The person page (/memories/<ws>/users/<id>/) at scale: 100,000 rows in each tier's table.

    python -m bench.browser_person                   # 100,000 rows per tier (the issue's scale)
    python -m bench.browser_person --rows 20000      # smaller
    python -m bench.browser_person --json var/browser_person.json

Target (issue 15): the person page's first page renders in p95 <= 150 ms server-side with
100,000 rows per tier.

Each tier's table (facts, episodic entries, episodes, threads, procedure runs, audit events
per audited tier) gets `--rows` rows. The worst case is one person owning most of them: the
"heavy" person owns 89% of every table, 10% are spread over 2,000 other people and 1% are in
another workspace (they must never count). A "typical" person owns ~50 rows per tier. Rows
are bulk-inserted, then ANALYZEd. Each case is a GET through Django's test client as a
logged-in viewer: session, access check, every section's selector, counts, pages and the
template, i.e. the whole server-side path but no network.
"""

import argparse
import gc
import os
import random
import time
import uuid
from datetime import timedelta

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
OTHER_PEOPLE = 2000


def build(n_rows: int, seed: int = 15):
    from django.db import connection
    from django.utils import timezone

    from core.models import AuditEvent, Membership
    from core.services import agent_get_or_create, operator_create, workspace_create
    from episodes.models import Episode
    from episodic.models import EpisodicEntry
    from episodic.services import entry_content_hash
    from facts.models import Fact, key_normalize
    from facts.services import fact_search_text
    from identities.models import ChannelIdentity, MemoryUser
    from procedures.models import Procedure, ProcedureRun
    from threads.models import Thread

    rng = random.Random(seed)
    now = timezone.now()
    workspace = workspace_create(name=f"bench-{uuid.uuid4().hex[:6]}")
    other = workspace_create(name=f"noise-{uuid.uuid4().hex[:6]}")
    viewer = operator_create(
        workspace=workspace,
        username=f"viewer-{uuid.uuid4().hex[:6]}",
        password="x" * 12,
        role=Membership.Role.VIEWER,
    ).user
    agents = [agent_get_or_create(workspace=workspace, slug=f"agent-{i}") for i in range(10)]
    other_agent = agent_get_or_create(workspace=other, slug="agent-0")
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa"]
    vocabulary = [a + b + c for a in syllables for b in syllables for c in syllables[:6]]
    batch = 5000
    timings = {}

    def ago(max_days=365):
        return now - timedelta(days=rng.randint(0, max_days), seconds=rng.randint(0, 86_400))

    def phrase(n=4):
        return " ".join(rng.choice(vocabulary) for _ in range(n))

    start = time.perf_counter()
    heavy = MemoryUser.objects.create(
        workspace=workspace, canonical_id="telegram:heavy", display_name="Heavy"
    )
    people = MemoryUser.objects.bulk_create(
        [
            MemoryUser(workspace=workspace, canonical_id=f"telegram:{i}", display_name=f"Person {i}")
            for i in range(OTHER_PEOPLE)
        ],
        batch_size=batch,
    )
    typical = people[0]
    stranger = MemoryUser.objects.create(workspace=other, canonical_id="telegram:heavy")
    merged = MemoryUser.objects.bulk_create(
        [
            MemoryUser(workspace=workspace, canonical_id=f"email:heavy{i}@example.com", merged_into=heavy)
            for i in range(100)
        ]
    )
    ChannelIdentity.objects.bulk_create(
        [
            ChannelIdentity(workspace=workspace, memory_user=heavy, channel="web", external_id=f"heavy-{i}")
            for i in range(100)
        ]
        + [
            ChannelIdentity(
                workspace=workspace, memory_user=p, channel="telegram", external_id=p.canonical_id
            )
            for p in people
        ],
        batch_size=batch,
    )
    timings["people"] = time.perf_counter() - start

    def owner(i):
        """(workspace, agent, person) of row i: 89% heavy, 10% others (50 each to the typical
        person), 1% another workspace."""
        if i % 100 == 0:
            return other, other_agent, stranger
        agent = agents[i % len(agents)]
        if i % 10 == 1:
            return workspace, agent, people[(i // 10) % OTHER_PEOPLE]
        return workspace, agent, heavy

    def audit(entity_type, rows):
        AuditEvent.objects.bulk_create(
            [
                AuditEvent(
                    workspace_id=row.workspace_id,
                    at=ago(),
                    actor="api_key:bench",
                    action="create",
                    entity_type=entity_type,
                    entity_id=str(row.pk),
                    changes={"bench": True},
                )
                for row in rows
            ],
            batch_size=batch,
        )

    start = time.perf_counter()
    threads = Thread.objects.bulk_create(
        [
            Thread(
                workspace=owner(i)[0],
                agent=owner(i)[1],
                memory_user=owner(i)[2],
                title=phrase(3),
                channel="telegram",
                channel_chat_id=str(i),
                last_activity_at=ago(60),
                message_count=rng.randint(0, 400),
            )
            for i in range(n_rows)
        ],
        batch_size=batch,
    )
    audit("thread", threads)
    timings["threads"] = time.perf_counter() - start

    start = time.perf_counter()
    fact_rows = []
    for i in range(n_rows):
        w, _agent, person = owner(i)
        # Every tenth key has an older, superseded version (history).
        superseded = i % 10 == 5
        key = f"pref_{i - 5 if superseded else i}"
        value = phrase(3)
        fact_rows.append(
            Fact(
                workspace=w,
                scope="user",
                key=key,
                key_normalized=key_normalize(key),
                value=value,
                search_text=fact_search_text(key, value),
                memory_user=person,
                confidence=round(rng.random(), 2),
                valid_from=ago(),
                valid_to=now if superseded else None,
                fact_type="user_preference",
            )
        )
    facts = Fact.objects.bulk_create(fact_rows, batch_size=batch)
    audit("fact", facts)
    timings["facts"] = time.perf_counter() - start

    start = time.perf_counter()
    episodes = Episode.objects.bulk_create(
        [
            Episode(
                workspace=owner(i)[0],
                agent=owner(i)[1],
                memory_user=owner(i)[2],
                trigger_type=rng.choice(["chat", "cron", "webhook"]),
                outcome=rng.choice(["success", "success", "failure"]),
                started_at=ago(),
                ended_at=now,
                duration_ms=rng.randint(100, 90_000),
                input={"goal": phrase(5)},
            )
            for i in range(n_rows)
        ],
        batch_size=batch,
    )
    audit("episode", episodes)
    timings["episodes"] = time.perf_counter() - start

    start = time.perf_counter()
    entry_rows = []
    for i in range(n_rows):
        w, agent, person = owner(i)
        content = f"{phrase(6)} {i}"
        entry_rows.append(
            EpisodicEntry(
                workspace=w,
                agent=agent,
                memory_user=person,
                content=content,
                content_hash=entry_content_hash(content),
                source="user_assertion",
                evidence=content,
                status=rng.choice(["active", "active", "superseded"]),
                created_at=ago(),
            )
        )
    entries = EpisodicEntry.objects.bulk_create(entry_rows, batch_size=batch)
    audit("episodic_entry", entries)
    timings["entries"] = time.perf_counter() - start

    start = time.perf_counter()
    procedures = Procedure.objects.bulk_create(
        [
            Procedure(
                workspace=workspace if i % 100 else other,
                name=f"procedure {i}",
                description=phrase(6),
                procedure_type="prompt_template",
                content=phrase(10),
                search_text=f"procedure {i}",
            )
            for i in range(1000)
        ]
    )
    by_workspace = {ws.pk: [p for p in procedures if p.workspace_id == ws.pk] for ws in (workspace, other)}
    ProcedureRun.objects.bulk_create(
        [
            ProcedureRun(
                workspace_id=episode.workspace_id,
                procedure=rng.choice(by_workspace[episode.workspace_id]),
                episode=episode,
                memory_user_id=episode.memory_user_id,
                success=rng.random() < 0.8,
                counted_at=episode.started_at,
            )
            for episode in episodes
        ],
        batch_size=batch,
    )
    timings["procedure runs"] = time.perf_counter() - start
    # Merges and the erasure of strangers also leave audit rows of memory users.
    audit("memory_user", merged + people[:1000])

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return workspace, viewer, heavy, typical, timings


def cases(workspace, heavy, typical):
    base = f"/memories/{workspace.pk}/users"
    h, t = f"{base}/{heavy.pk}/", f"{base}/{typical.pk}/"
    return [
        ("heavy person: first page", h, None),
        ("typical person: first page", t, None),
        ("heavy: facts page 5", f"{h}?facts_page=5", "person-facts"),
        ("heavy: facts with past versions", f"{h}?facts_history=1", "person-facts"),
        ("heavy: facts q=kalo", f"{h}?facts_q=kalo", "person-facts"),
        ("heavy: entries q=mine", f"{h}?entries_q=mine", "person-entries"),
        ("heavy: episodes q=cron", f"{h}?episodes_q=cron", "person-episodes"),
        ("heavy: threads q=ka", f"{h}?threads_q=ka", "person-threads"),
        ("heavy: procedures page 2", f"{h}?procedures_page=2", "person-procedures"),
        ("heavy: audit page 3", f"{h}?audit_page=3", "person-audit"),
        ("heavy: audit q=create", f"{h}?audit_q=create", "person-audit"),
        ("heavy: merges", f"{h}?merges_q=heavy1", "person-merges"),
    ]


def main():
    parser = browser_parser(__doc__, help="rows per tier table (default 100,000)")
    parser.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gc.collect() and gc.freeze() after loading, as web processes do once warm (default on)",
    )
    args = parser.parse_args()

    browser_setup()
    started = time.perf_counter()
    workspace, viewer, heavy, typical, timings = build(args.rows)
    print_loaded(f"{args.rows:,} rows per tier", started, timings)
    client = logged_in_client(viewer)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()

    def check(case, response):
        assert b"noise-" not in response.content

    load_before = os.getloadavg()
    reference = machine_reference_ms()
    page_cases = [
        PageCase(name, path, fragments=(("section", target),) if target else ())
        for name, path, target in cases(workspace, heavy, typical)
    ]
    rows, results = measure_pages(client, page_cases, repeat=args.repeat, check=check)
    load_after = os.getloadavg()
    print_table(
        f"person page, {args.rows:,} rows per tier (target first page p95 <= {TARGET_MS:.0f} ms)", rows
    )
    print(load_line(load_before, load_after))
    print(f"machine reference: {reference:.1f} ms")
    first = max(
        results[name]["page"]["p95_ms"] for name in ("heavy person: first page", "typical person: first page")
    )
    verdict("first page worst p95", first, TARGET_MS)
    write_json(
        args.json,
        {
            "rows_per_tier": args.rows,
            "target_ms": TARGET_MS,
            "cores": os.cpu_count(),
            "cases": results,
            "load_average": [load_before, load_after],
            "machine_reference_ms": reference,
            "first_page_worst_p95_ms": first,
            "gc_freeze": args.gc_freeze,
        },
    )


if __name__ == "__main__":
    main()
