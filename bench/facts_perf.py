"""Global memory at scale: scope-resolving lookup, fuzzy key search, recall and batch delete.

    python -m bench.facts_perf                       # 1,000,000 facts, 1,000 users, 10 agents
    python -m bench.facts_perf --facts 200000        # smaller
    python -m bench.facts_perf --json var/facts_perf.json

Targets (issue 4): lookup p95 <= 5 ms and fuzzy key search p95 <= 20 ms at 1M facts across
1,000 users and 10 agents; batch delete of 10,000 facts <= 2 s.

The dataset is loaded with COPY (psycopg 3) into a throwaway embedded PostgreSQL, then
ANALYZEd. Timings call the same selectors and services the API uses, in-process, so they
measure the database work and the ORM, not HTTP.
"""

import argparse
import json
import random
import time
import uuid
from datetime import timedelta

from bench.harness import measure, print_table, setup_django, summarize, write_json

WORDS = (  # noqa: SIM905 - readable as prose
    "local time zone favourite colour language city home work email phone name pet food music sport team "
    "project deadline lesson command get set preferred default last first meeting calendar budget invoice "
    "address birthday partner child school car travel flight hotel diet allergy doctor gym book movie"
).split()
SEPARATORS = ("_", "-", " ", "_")


def key_vocabulary(rng: random.Random, size: int) -> list[str]:
    keys = set()
    while len(keys) < size:
        words = rng.sample(WORDS, rng.choice((2, 3, 3, 4)))
        sep = rng.choice(SEPARATORS)
        keys.add(sep.join(words) + (f"{sep}{rng.randint(1, 99)}" if rng.random() < 0.5 else ""))
    return sorted(keys)


def build(*, n_facts: int, n_users: int, n_agents: int, seed: int = 7):
    from django.db import connection
    from django.utils import timezone

    from core.services import agent_get_or_create, workspace_create
    from facts.models import key_normalize
    from identities.models import MemoryUser
    from threads.models import Thread

    rng = random.Random(seed)
    workspace = workspace_create(name=f"bench-{uuid.uuid4().hex[:6]}")
    agents = [agent_get_or_create(workspace=workspace, slug=f"agent-{i}") for i in range(n_agents)]
    users = MemoryUser.objects.bulk_create(
        [MemoryUser(workspace=workspace, canonical_id=f"telegram:{i}") for i in range(n_users)],
        batch_size=1000,
    )
    threads = Thread.objects.bulk_create(
        [Thread(workspace=workspace, agent=agents[i % n_agents], memory_user=u) for i, u in enumerate(users)],
        batch_size=1000,
    )
    vocabulary = key_vocabulary(rng, 6000)
    now = timezone.now()
    # Shares of the rows: most facts are about users, as in a support or assistant deployment.
    n_global = n_facts // 50
    n_agent = n_facts // 20
    n_session = n_facts // 33
    n_history = n_facts // 20
    n_user = n_facts - n_global - n_agent - n_session - n_history
    columns = (
        "id, created_at, updated_at, workspace_id, scope, agent_id, memory_user_id, thread_id, key, "
        "key_normalized, value, search_text, fact_type, confidence, times_confirmed, times_contradicted, "
        "source, evidence, valid_from, valid_to, last_confirmed_at, access_count, created_by"
    )

    def row(scope, key, agent_id, user_id, thread_id, valid_to=None):
        value = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randint(1, 10_000)}"
        valid_from = now - timedelta(days=rng.randint(0, 365), seconds=rng.randint(0, 86_400))
        if valid_to is not None:
            valid_from = valid_to - timedelta(days=rng.randint(1, 100))
        return (
            uuid.uuid4(),
            valid_from,
            valid_from,
            workspace.pk,
            scope,
            agent_id,
            user_id,
            thread_id,
            key,
            key_normalize(key),
            json.dumps(value),
            f"{key_normalize(key)} {value}",
            "user_preference" if scope == "user" and rng.random() < 0.3 else "world_knowledge",
            round(rng.uniform(0.3, 1.0), 3),
            rng.randint(0, 5),
            0,
            "api",
            "",
            valid_from,
            valid_to,
            valid_from,
            0,
            "bench",
        )

    def rows():
        for key in rng.sample(vocabulary, min(n_global, len(vocabulary))):
            yield row("global", key, None, None, None)
        for i in range(n_global - min(n_global, len(vocabulary))):
            yield row("global", f"{rng.choice(vocabulary)}_{i}", None, None, None)
        per_agent = n_agent // n_agents
        for agent in agents:
            for key in rng.sample(vocabulary, min(per_agent, len(vocabulary))):
                yield row("agent", key, agent.pk, None, None)
            for j in range(per_agent - min(per_agent, len(vocabulary))):
                yield row("agent", f"{rng.choice(vocabulary)}_{j}", agent.pk, None, None)
        per_user = n_user // n_users
        history_per_user = n_history // n_users
        for user in users:
            keys = rng.sample(vocabulary, per_user)
            for key in keys:
                yield row("user", key, None, user.pk, None)
            for key in keys[:history_per_user]:
                yield row("user", key, None, user.pk, None, valid_to=now - timedelta(days=rng.randint(1, 30)))
        per_thread = n_session // len(threads)
        for thread in threads:
            for key in rng.sample(vocabulary, per_thread):
                yield row("session", key, thread.agent_id, thread.memory_user_id, thread.pk)

    started = time.perf_counter()
    loaded = 0
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY facts_fact ({columns}) FROM STDIN") as copy:
            for values in rows():
                copy.write_row(values)
                loaded += 1
        cursor.execute(
            "INSERT INTO facts_factkey (workspace_id, key_normalized) "
            "SELECT DISTINCT workspace_id, key_normalized FROM facts_fact WHERE workspace_id = %s "
            "ON CONFLICT DO NOTHING",
            [workspace.pk],
        )
        cursor.execute("ANALYZE facts_fact")
        cursor.execute("ANALYZE facts_factkey")
    load_seconds = time.perf_counter() - started
    return workspace, agents, users, threads, vocabulary, loaded, load_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--json")
    args = parser.parse_args()

    setup_django()
    from core.access import Principal
    from core.models import Membership
    from facts.models import Fact
    from facts.selectors import fact_fuzzy_search, fact_lookup
    from facts.services import fact_batch_delete
    from runtime.selectors import recall
    from threads.selectors import MemoryContext

    workspace, agents, users, threads, vocabulary, loaded, load_seconds = build(
        n_facts=args.facts, n_users=args.users, n_agents=args.agents
    )
    print(f"loaded {loaded:,} facts in {load_seconds:.1f} s")
    rng = random.Random(11)

    def lookup():
        thread = rng.choice(threads)
        fact_lookup(
            workspace=workspace,
            key=rng.choice(vocabulary),
            agent=thread.agent,
            memory_user=thread.memory_user,
            thread=thread,
        )

    def context():
        thread = rng.choice(threads)
        return MemoryContext(
            workspace=workspace, agent=thread.agent, memory_user=thread.memory_user, thread=thread
        )

    def fuzzy():
        words = rng.sample(WORDS, 2)
        fact_fuzzy_search(context=context(), key=rng.choice((" ".join(words), "-".join(words), words[0])))

    def fuzzy_typo():
        word = rng.choice([w for w in WORDS if len(w) > 4])
        cut = rng.randrange(1, len(word) - 1)
        fact_fuzzy_search(context=context(), key=word[:cut] + word[cut + 1 :])

    def recall_list():
        recall(context=context())

    def recall_query():
        recall(context=context(), query=f"{rng.choice(WORDS)} {rng.choice(WORDS)}", memory_type="facts")

    def recall_sentence():
        # A question no fact holds every word of ("zebra" is in none): recall falls back to the
        # facts holding any of its words, rarest first, over everything the context sees.
        recall(
            context=context(),
            query=f"what was my {rng.choice(WORDS)} for the {rng.choice(WORDS)} zebra",
            memory_type="facts",
        )

    rows = [
        ("lookup (session>user>agent>global)", measure(lookup, repeat=args.repeat)),
        ("fuzzy key search (words, any order)", measure(fuzzy, repeat=args.repeat)),
        ("fuzzy key search (typo, trigram fallback)", measure(fuzzy_typo, repeat=args.repeat // 2)),
        ("recall, no arguments (list)", measure(recall_list, repeat=args.repeat // 2)),
        ("recall, full-text query (facts)", measure(recall_query, repeat=args.repeat // 2)),
        ("recall, a question no fact holds all of", measure(recall_sentence, repeat=args.repeat // 2)),
    ]

    principal = Principal(workspace=workspace, role=Membership.Role.EDITOR)
    deletes = []
    for _ in range(3):
        ids = list(
            Fact.objects.filter(workspace=workspace, scope="user")
            .order_by("memory_user_id", "key")
            .values_list("pk", flat=True)[:10_000]
        )
        started = time.perf_counter()
        counts = fact_batch_delete(principal=principal, ids=ids, actor="bench")
        deletes.append((time.perf_counter() - started) * 1000)
        assert counts["facts"] == len(ids) == 10_000, counts
    rows.append(("batch delete 10,000 facts", summarize(deletes)))
    print_table(f"Global memory: {loaded:,} facts, {args.users} users, {args.agents} agents", rows)
    write_json(
        args.json,
        {
            "facts": loaded,
            "users": args.users,
            "agents": args.agents,
            "load_seconds": round(load_seconds, 1),
            "results": dict(rows),
        },
    )


if __name__ == "__main__":
    main()
