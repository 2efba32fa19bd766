"""The /memories overview at scale: a workspace holding 1M messages (and 500,000 other rows).

    python -m bench.browser_overview                       # 1,000,000 messages (the issue's scale)
    python -m bench.browser_overview --messages 200000     # smaller
    python -m bench.browser_overview --json var/browser_overview.json

Target (issue 15): the overview renders in <= 200 ms server-side at 1M rows.

Rows go straight into the tiers' real tables with INSERT ... SELECT over generate_series,
each copying a template row written through the ORM (so every NOT NULL column gets a real
value whatever columns the tiers grow), spread over the last 90 days and 10 agents, plus 1%
in a second workspace that must never show. Then the periodic aggregation runs as beat runs
it: first a 90-day backfill (`activity_backfill`), then the incremental run (yesterday and
today), both timed. The page is a GET through Django's test client as a logged-in viewer:
session, middleware, access check, the aggregates' reads, the audit trail and rendering of
the SVG charts, i.e. the whole server-side path but no network.
"""

import datetime as dt
import os
import time
import uuid

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

TARGET_MS = 200.0
DAYS = 90


def _clone(model, template_pk, count: int, overrides: dict, params: list) -> float:
    """Insert `count` copies of the template row; `overrides` maps columns to SQL over `g`
    (1..count). Returns seconds taken."""
    from django.db import connection

    table = model._meta.db_table
    columns = [
        f.column
        for f in model._meta.concrete_fields
        if not getattr(f, "generated", False)
        and not (f.primary_key and f.get_internal_type() == "BigAutoField")
    ]
    select = [overrides.get(column, f't."{column}"') for column in columns]
    quoted = ", ".join(f'"{column}"' for column in columns)
    pk = model._meta.pk.column
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({quoted}) SELECT {', '.join(select)} "
            f'FROM {table} t, generate_series(1, %s) g WHERE t."{pk}" = %s',
            [*params, count, template_pk],
        )
    return time.perf_counter() - start


def _spread(days: int = DAYS) -> str:
    # A creation time in the last `days` days, more of them recent (growth).
    return f"now() - (sqrt(random()) * interval '{days} days')"


def build(n_messages: int):
    from django.utils import timezone

    from activity.models import DailyCounter
    from core.counters import ENTRIES_REJECTED, RECALLS_CONTEXT, RECALLS_RECALL, RECALLS_SEARCH
    from core.models import AuditEvent, Membership
    from core.services import agent_get_or_create, operator_create, workspace_create
    from episodes.models import Episode
    from episodic.models import EpisodicEntry
    from episodic.services import entry_content_hash
    from facts.models import Fact, key_normalize
    from facts.services import fact_search_text
    from identities.models import MemoryUser
    from threads.models import Message, Thread

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
    users = MemoryUser.objects.bulk_create(
        [
            MemoryUser(workspace=workspace, canonical_id=f"telegram:{i}", display_name=f"P{i}")
            for i in range(1000)
        ]
    )
    threads = Thread.objects.bulk_create(
        [
            Thread(workspace=workspace, agent=agents[i % 10], memory_user=users[i], title=f"t{i}")
            for i in range(1000)
        ]
    )
    other_thread = Thread.objects.create(workspace=other, agent=other_agent, title="noise")
    thread_ids = [str(t.pk) for t in threads]
    agent_ids = [str(a.pk) for a in agents]
    user_ids = [str(u.pk) for u in users]

    message = Message.objects.create(
        workspace=workspace, thread=threads[0], role="user", content="hello there"
    )
    content = "Ada moved to Lisbon in May."
    entry = EpisodicEntry.objects.create(
        workspace=workspace,
        agent=agents[0],
        memory_user=users[0],
        content=content,
        content_hash=entry_content_hash(content),
        source="user_assertion",
        evidence=content,
    )
    fact = Fact.objects.create(
        workspace=workspace,
        scope="global",
        key="office",
        key_normalized=key_normalize("office"),
        value="Lisbon",
        search_text=fact_search_text("office", "Lisbon"),
    )
    episode = Episode.objects.create(
        workspace=workspace, agent=agents[0], trigger_type="chat", outcome="success"
    )
    audit = AuditEvent.objects.create(
        workspace=workspace, actor="system", action="create", entity_type="fact", entity_id=str(fact.pk)
    )
    timings = {}
    when = _spread()
    timings["messages"] = _clone(
        Message,
        message.pk,
        n_messages,
        {
            "id": "gen_random_uuid()",
            "thread_id": "(%s::uuid[])[1 + g %% 1000]",
            "role": "CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END",
            "seq": "g",
            "created_at": when,
            "updated_at": "now()",
        },
        [thread_ids],
    )
    # The noise workspace: 1% as many messages.
    _clone(
        Message,
        message.pk,
        n_messages // 100,
        {"id": "gen_random_uuid()", "workspace_id": "%s::uuid", "thread_id": "%s::uuid", "created_at": when},
        [str(other.pk), str(other_thread.pk)],
    )
    per_tier = n_messages // 5
    timings["facts"] = _clone(
        Fact,
        fact.pk,
        per_tier,
        {
            "id": "gen_random_uuid()",
            "key": "'key_' || g",
            "key_normalized": "'key ' || g",
            "created_at": when,
            "valid_to": "CASE WHEN g %% 4 = 0 THEN now() END",
        },
        [],
    )
    timings["entries"] = _clone(
        EpisodicEntry,
        entry.pk,
        per_tier,
        {
            "id": "gen_random_uuid()",
            "agent_id": "(%s::uuid[])[1 + g %% 10]",
            "memory_user_id": "(%s::uuid[])[1 + g %% 1000]",
            "content_hash": "md5(g::text)",
            "created_at": when,
        },
        [agent_ids, user_ids],
    )
    timings["episodes"] = _clone(
        Episode,
        episode.pk,
        per_tier // 2,
        {"id": "gen_random_uuid()", "agent_id": "(%s::uuid[])[1 + g %% 10]", "created_at": when},
        [agent_ids],
    )
    timings["audit"] = _clone(
        AuditEvent,
        audit.pk,
        per_tier,
        {
            "at": when,
            "action": "CASE WHEN g %% 5 = 0 THEN 'update' ELSE 'create' END",
            "changes": 'CASE WHEN g %% 5 = 0 THEN \'{"outcome": "confirmed"}\'::jsonb '
            "WHEN g %% 7 = 0 THEN '{\"outcome\": \"superseded\"}'::jsonb ELSE '{}'::jsonb END",
        },
        [],
    )
    today = timezone.now().astimezone(dt.UTC).date()
    metrics = (RECALLS_CONTEXT, RECALLS_RECALL, RECALLS_SEARCH, ENTRIES_REJECTED + "duplicate_similar")
    DailyCounter.objects.bulk_create(
        [
            DailyCounter(
                workspace=workspace,
                agent=agent,
                day=today - dt.timedelta(days=d),
                metric=metric,
                value=d * 7 + 3,
            )
            for d in range(DAYS)
            for agent in agents
            for metric in metrics
        ]
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return workspace, viewer, timings


def main():
    parser = browser_parser(
        __doc__, size_flag="--messages", default=1_000_000, help="messages (default 1,000,000)"
    )
    parser.set_defaults(repeat=40)
    args = parser.parse_args()

    browser_setup()
    from django.utils import timezone

    from activity.services import activity_aggregate

    started = time.perf_counter()
    workspace, viewer, timings = build(args.messages)
    rows = args.messages + args.messages // 100 + 3 * (args.messages // 5) + args.messages // 10
    print_loaded(f"{rows:,} rows", started, timings)

    today = timezone.now().astimezone(dt.UTC).date()
    start = time.perf_counter()
    backfill = activity_aggregate(first=today - dt.timedelta(days=DAYS - 1), last=today)
    backfill_s = time.perf_counter() - start
    start = time.perf_counter()
    incremental = activity_aggregate()
    incremental_s = time.perf_counter() - start
    print(
        f"aggregation: {DAYS}-day backfill {backfill_s:.1f} s ({backfill['rows']:,} rows), "
        f"incremental run (yesterday + today) {incremental_s:.1f} s ({incremental['rows']:,} rows)"
    )

    client = logged_in_client(viewer)
    base = f"/memories/{workspace.pk}/overview/"
    cases = [
        PageCase("overview, 30 days (page)", base),
        PageCase("overview, 90 days (page)", base + "?days=90"),
        PageCase("overview, 30 days (htmx)", base, target="main"),
    ]

    def check(case, response):
        assert b"noise-" not in response.content

    load_before = os.getloadavg()
    reference = machine_reference_ms()
    results, _by_name = measure_pages(client, cases, repeat=args.repeat, check=check, page_suffix="")
    load_after = os.getloadavg()
    print_table(f"/memories overview, {rows:,} rows in the tiers (target p95 <= {TARGET_MS:.0f} ms)", results)
    print(load_line(load_before, load_after))
    print(f"machine reference: {reference:.1f} ms")
    worst = max(stats["p95_ms"] for _, stats in results)
    verdict("worst p95", worst, TARGET_MS)
    write_json(
        args.json,
        {
            "rows": rows,
            "messages": args.messages,
            "target_ms": TARGET_MS,
            "cases": dict(results),
            "aggregation_seconds": {
                "backfill_90_days": round(backfill_s, 2),
                "incremental": round(incremental_s, 2),
            },
            "load_average": [load_before, load_after],
            "machine_reference_ms": reference,
            "cores": os.cpu_count(),
        },
    )


if __name__ == "__main__":
    main()
