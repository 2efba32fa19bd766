"""Episodic memory performance: search latency at scale, extraction latency, batch embedding.

    python -m bench.episodic_perf [--entries 1000000] [--pairs 1000] [--json OUT]

1. Search: `--entries` entries spread over `--pairs` (agent, memory user) pairs, built
   in SQL with random words (a 2,000-word vocabulary) and random 384-d vectors: real
   MiniLM vectors for a million rows would take hours on 2 cores, and the query plan,
   not the vector values, is what is measured. `entry_search_hybrid` is timed with a
   precomputed query vector (server-side, excluding query embedding) and with the local
   model embedding the query (end to end). A scope of 1,000 rows takes the exact plan.
2. HNSW routing: one scope of `--hnsw-scope` rows under the local model name, so the
   partial HNSW index is built and the search is routed to it; timed the same way.
3. Extraction of a 20-turn transcript with 5 client candidates, excluding embedding
   (candidate vectors are precomputed; the provider returns them from memory).
4. Batch embedding with the local model: texts/s batched vs one at a time.

Search path only (issue 17):

    python -m bench.episodic_perf --search-scales 2000,20000,100000 --pairs 20 [--compare REF]

grows the same `--pairs` scopes to each total in turn and, at each, times `entry_search_hybrid`
with a precomputed query vector (p50/p95), counts its statements (round trips) and their
share of the time, and prints `EXPLAIN (ANALYZE, BUFFERS)` of each statement at the largest
scale. `--compare REF` loads core/ranking.py as of git REF beside the current one and
alternates the two, query for query, so both run under the same load. `--cold` forgets every
scope's counted size and BM25 statistics before each search, as a process meets a person it
has not searched within SEARCH_SCOPE_SIZE_CACHE_SECONDS; `--as-hnsw-model` gives the random
model an entry among the models with an HNSW index, so that a scope never counted waits for
its count as one of all-MiniLM-L6-v2 does (no index is built: the scopes stay on the exact plan).
"""

import argparse
import random
import time
import uuid

from bench.harness import measure, print_table, setup_django, summarize, write_json

VOCABULARY_SIZE = 2000
VECTOR_POOL = 20_000


def build_entries(
    *, workspace, agents, people, per_pair: int, model: str, dims: int = 384, in_graph: bool = False
) -> None:
    """Insert per_pair entries and vectors for every (agent, person) pair, in SQL; the vectors
    are in the HNSW graph when `in_graph` (new vectors are not, as in the service)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bench_vocab AS "
            "SELECT array_agg(md5(i::text)::varchar(7)) AS w FROM generate_series(1, %s) i",
            [VOCABULARY_SIZE],
        )
        # Rows draw their vector from a pool of random ones: generating 384 random numbers
        # per row dominated the build, and the exact sort costs the same either way.
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bench_vectors AS "
            "SELECT i, (SELECT array_agg(random() - 0.5) FROM generate_series(1, %s) d WHERE i >= 0)::vector "
            "AS v FROM generate_series(0, %s) i",
            [dims, VECTOR_POOL - 1],
        )
        for agent, person in zip(agents, people, strict=True):
            cursor.execute(
                """
                WITH rows AS (
                    SELECT gen_random_uuid() AS id, g,
                        (SELECT string_agg(v.w[1 + floor(random() * %(vocab)s)::int], ' ')
                         FROM bench_vocab v, generate_series(1, 10 + (g %% 5))) AS content
                    FROM generate_series(1, %(n)s) g
                ), entries AS (
                    INSERT INTO episodes_episodicentry (id, created_at, updated_at, workspace_id, agent_id,
                        memory_user_id, content, content_hash, source, evidence, source_message_ids,
                        metadata, status, embedding_model, valid_from, times_confirmed, consolidation,
                        review, review_note, reviewed_by)
                    SELECT id, now() - (g || ' minutes')::interval, now(), %(workspace)s, %(agent)s,
                        %(person)s, content, md5(content), 'user_assertion', content, '[]', '{}',
                        'active', %(model)s, now() - (g || ' minutes')::interval, 0, '{}',
                        'approved', '', ''
                    FROM rows RETURNING id
                )
                INSERT INTO episodes_entryembedding (entry_id, workspace_id, agent_id, memory_user_id, model,
                    dimensions, embedding, created_at, in_graph)
                SELECT e.id, %(workspace)s, %(agent)s, %(person)s, %(model)s, %(dims)s,
                    bv.v, now(), %(in_graph)s
                FROM (SELECT id, row_number() OVER () AS n FROM entries) e
                JOIN bench_vectors bv ON bv.i = (e.n + %(offset)s) %% %(pool)s
                """,
                {
                    "vocab": VOCABULARY_SIZE,
                    "n": per_pair,
                    "workspace": workspace.pk,
                    "agent": agent.pk,
                    "person": person.pk,
                    "model": model,
                    "dims": dims,
                    "offset": random.randrange(VECTOR_POOL),
                    "pool": VECTOR_POOL,
                    "in_graph": in_graph,
                },
            )
        cursor.execute("ANALYZE episodes_episodicentry")
        cursor.execute("ANALYZE episodes_entryembedding")


class StatementLog:
    """Times every statement Django runs (a connection execute_wrapper)."""

    def __init__(self):
        self.rows: list[tuple[str, float]] = []

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.rows.append((sql, (time.perf_counter() - started) * 1000))


def statement_label(sql: str) -> str:
    text = " ".join(sql.split())
    batched = " ".join(sql.split()).count(";") + 1
    for needle, label in (
        ("hnsw.iterative_scan", "vector (hnsw)"),
        ("WITH scope AS", "bm25"),
        ("WITH lex AS", "combined"),
        ("count(*) FROM (SELECT 1", "scope count"),
        ("<=> %(qvec)s::vector", "vector/describe"),
        ("source_thread_id FROM", "features"),
        ("PREPARE", "prepare"),
    ):
        if needle in text:
            return label if batched == 1 else f"{label} +{batched - 1}"
    return text[:40]


def reference_search(ref: str):
    """`entry_search_hybrid` running core/ranking.py as of git `ref` (for --compare)."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    import episodic.selectors as selectors

    source = subprocess.run(
        ["git", "show", f"{ref}:core/ranking.py"], check=True, capture_output=True, text=True
    ).stdout
    path = tempfile.mkdtemp(prefix="bench-ranking-") + "/ranking_ref.py"
    with open(path, "w") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location("ranking_ref", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ranking_ref"] = module
    spec.loader.exec_module(module)
    current = selectors.hybrid_search

    def search(**kwargs):
        selectors.hybrid_search = module.hybrid_search
        # The old module's Corpus is another class: hand it the same fields.
        try:
            return selectors.entry_search_hybrid(**kwargs)
        finally:
            selectors.hybrid_search = current

    return search


def search_scales(args) -> None:
    """The search path alone at growing totals over the same scopes (see module docstring)."""
    import os

    from django.db import connection

    from core.services import agent_get_or_create, workspace_create
    from episodic.selectors import entry_search_hybrid
    from identities.models import MemoryUser

    rng = random.Random(7)
    model = "bench-random-384"
    workspace = workspace_create(name=f"bench-search-{uuid.uuid4().hex[:6]}")
    agent = agent_get_or_create(workspace=workspace, slug="agent")
    people = MemoryUser.objects.bulk_create(
        MemoryUser(workspace=workspace, canonical_id=f"bench:{i}") for i in range(args.pairs)
    )
    reference = reference_search(args.compare) if args.compare else None
    import sys

    import core.ranking

    modules = [core.ranking] + ([sys.modules["ranking_ref"]] if reference else [])
    if args.as_hnsw_model:
        for module in modules:
            module.HNSW_MODELS[model] = 384

    def forget() -> None:
        for module in modules:
            module._scope_sizes.clear()
            module._bm25_stats.clear()

    results: dict = {"load_before": os.getloadavg(), "scales": {}}
    built = 0
    scales = [int(x) for x in args.search_scales.split(",")]
    for total in scales:
        started = time.perf_counter()
        build_entries(
            workspace=workspace,
            agents=[agent] * args.pairs,
            people=people,
            per_pair=(total - built) // args.pairs,
            model=model,
        )
        built = total
        with connection.cursor() as cursor:
            if args.without_scope_index:
                # As before episodic 0005: BM25's document count reads every row's heap tuple
                # through the scope index instead of an index-only scan of the searchable rows.
                cursor.execute("DROP INDEX IF EXISTS episodes_entry_searchable")
            cursor.execute("VACUUM ANALYZE episodes_episodicentry")
            cursor.execute("VACUUM ANALYZE episodes_entryembedding")
            cursor.execute("SELECT array_agg(w) FROM (SELECT unnest(w) AS w FROM bench_vocab) x")
            vocab = cursor.fetchone()[0]
        build_s = round(time.perf_counter() - started, 1)

        def kwargs(vocab=vocab):
            return {
                "agent": agent,
                "memory_user": people[rng.randrange(args.pairs)],
                "query": random_query(rng, vocab),
                "query_vector": random_vector(rng),
                "model": model,
                "top_k": 12,
            }

        variants = {"current": entry_search_hybrid}
        if reference:
            variants = {"reference": reference, **variants}
        samples: dict = {name: [] for name in variants}
        statements: dict = {name: StatementLog() for name in variants}
        for _ in range(10):
            for fn in variants.values():
                fn(**kwargs())
        for _ in range(args.queries):
            call = kwargs()
            for name, fn in variants.items():
                log = statements[name]
                if args.cold:
                    forget()
                with connection.execute_wrapper(log):
                    t0 = time.perf_counter()
                    fn(**call)
                    samples[name].append((time.perf_counter() - t0) * 1000)
        load = os.getloadavg()
        entry = {"build_s": build_s, "load": load}
        print(f"\n{total:,} entries over {args.pairs} scopes (built in {build_s} s), load {load}")
        for name in variants:
            stats = summarize(samples[name])
            per: dict = {}
            for sql, ms in statements[name].rows:
                per.setdefault(statement_label(sql), []).append(ms)
            trips = len(statements[name].rows) / args.queries
            entry[name] = {
                **stats,
                "statements_per_search": trips,
                "statements": {k: summarize(v) for k, v in per.items()},
            }
            p50, p95 = stats["p50_ms"], stats["p95_ms"]
            print(f"  {name:<10} p50 {p50:.1f}  p95 {p95:.1f} ms, {trips:.1f} statements")
            for label, values in per.items():
                st = summarize(values)
                share = len(values) / args.queries
                print(f"      {label:<18} n/search {share:.1f}  p50 {st['p50_ms']:.2f} ms")
        results["scales"][total] = entry
        if total == scales[-1] and args.explain:
            explain_search(kwargs())
    write_json(args.json, results)


def explain_search(call: dict) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement one search runs."""
    from django.db import connection

    from episodic.selectors import entry_search_hybrid

    log = []

    def capture(execute, sql, params, many, context):
        log.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        entry_search_hybrid(**call)
    with connection.cursor() as cursor:
        for sql, params in log:
            # A batch's statements share one (namespaced) parameter dict: each is explained
            # alone, after the SET LOCALs that travel with it.
            for part in (p for p in sql.split(";") if p.strip()):
                if part.strip().upper().startswith("SET "):
                    cursor.execute(part)
                    continue
                print(f"\n--- {statement_label(part)}")
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + part, params)
                for (line,) in cursor.fetchall():
                    print(line)


def random_query(rng, vocab) -> str:
    return " ".join(rng.choice(vocab) for _ in range(4))


def random_vector(rng, dims=384) -> list[float]:
    return [rng.random() - 0.5 for _ in range(dims)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--hnsw-scope", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json")
    parser.add_argument("--search-scales", help="comma-separated totals: the search path only")
    parser.add_argument("--compare", help="git ref of core/ranking.py to alternate with (--search-scales)")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN each statement at the last scale")
    parser.add_argument(
        "--without-scope-index",
        action="store_true",
        help="drop the searchable rows' partial index (episodic 0005) to measure without it",
    )
    parser.add_argument(
        "--cold", action="store_true", help="no scope size or BM25 statistics known to any search"
    )
    parser.add_argument(
        "--as-hnsw-model",
        action="store_true",
        help="the random model counts as one with an HNSW index (a never-counted scope waits for its count)",
    )
    args = parser.parse_args()

    setup_django()
    if args.search_scales:
        search_scales(args)
        return
    from django.conf import settings
    from django.db import connection

    from core.embeddings import LOCAL_MODEL_NAME, LocalEmbeddingProvider
    from core.services import agent_get_or_create, vector_graph_extend, workspace_create
    from episodic.models import EpisodicEntry
    from episodic.selectors import entry_search_hybrid
    from episodic.services import entry_embed_batch, entry_extract
    from identities.models import MemoryUser

    rng = random.Random(42)
    results: dict = {"scale": vars(args)}
    rows = []
    workspace = workspace_create(name=f"bench-episodic-{uuid.uuid4().hex[:6]}")
    agent_count = max(1, args.pairs // 100)
    agents_pool = [agent_get_or_create(workspace=workspace, slug=f"agent-{i}") for i in range(agent_count)]
    people = MemoryUser.objects.bulk_create(
        MemoryUser(workspace=workspace, canonical_id=f"bench:{i}") for i in range(args.pairs)
    )
    agents = [agents_pool[i % agent_count] for i in range(args.pairs)]

    started = time.perf_counter()
    build_entries(
        workspace=workspace,
        agents=agents,
        people=people,
        per_pair=args.entries // args.pairs,
        model="bench-random-384",
    )
    results["build_s"] = round(time.perf_counter() - started, 1)
    print(f"built {args.entries} entries over {args.pairs} pairs in {results['build_s']} s")
    with connection.cursor() as cursor:
        cursor.execute("SELECT array_agg(w) FROM (SELECT unnest(w) AS w FROM bench_vocab) x")
        vocab = cursor.fetchone()[0]

    def one_search(model="bench-random-384", person_index=None, agent=None, person=None):
        index = rng.randrange(args.pairs) if person_index is None else person_index
        return entry_search_hybrid(
            agent=agent or agents[index],
            memory_user=person or people[index],
            query=random_query(rng, vocab),
            query_vector=random_vector(rng),
            model=model,
            top_k=12,
        )

    plan = one_search().plan
    stats = measure(one_search, repeat=args.queries, warmup=10)
    rows.append((f"search, scope {args.entries // args.pairs} ({plan}), no embed", stats))
    results["search_server_side"] = {**stats, "plan": plan}

    local = LocalEmbeddingProvider()
    local.embed(["warm up"])

    def one_search_with_embedding():
        index = rng.randrange(args.pairs)
        query = random_query(rng, vocab)
        vector = local.embed_query(query)
        return entry_search_hybrid(
            agent=agents[index],
            memory_user=people[index],
            query=query,
            query_vector=vector,
            model="bench-random-384",
            top_k=12,
        )

    stats = measure(one_search_with_embedding, repeat=args.queries, warmup=5)
    rows.append(("search incl. local query embedding", stats))
    results["search_with_embedding"] = stats

    if args.hnsw_scope:
        big_agent = agent_get_or_create(workspace=workspace, slug="hnsw-agent")
        big_person = MemoryUser.objects.create(workspace=workspace, canonical_id="bench:hnsw")
        started = time.perf_counter()
        build_entries(
            workspace=workspace,
            agents=[big_agent],
            people=[big_person],
            per_pair=args.hnsw_scope,
            model=LOCAL_MODEL_NAME,
        )
        results["hnsw_build_s"] = round(time.perf_counter() - started, 1)
        # What the worker does once a search has taken the HNSW plan for this scope.
        started = time.perf_counter()
        vector_graph_extend(
            table="episodes_entryembedding",
            model=LOCAL_MODEL_NAME,
            scope={"agent_id": big_agent.pk, "memory_user_id": big_person.pk},
        )
        results["hnsw_graph_extend_s"] = round(time.perf_counter() - started, 1)
        plan = one_search(model=LOCAL_MODEL_NAME, agent=big_agent, person=big_person).plan
        stats = measure(
            lambda: one_search(model=LOCAL_MODEL_NAME, agent=big_agent, person=big_person),
            repeat=args.queries,
            warmup=10,
        )
        rows.append((f"search, scope {args.hnsw_scope} ({plan}), no embed", stats))
        results["search_hnsw_scope"] = {**stats, "plan": plan}

    # Extraction: a 20-turn transcript, 5 client candidates, vectors precomputed.
    person = MemoryUser.objects.create(workspace=workspace, canonical_id="bench:extract")
    extract_agent = agents_pool[0]
    transcript = []
    for turn in range(10):
        transcript.append(
            {"id": f"u{turn}", "role": "user", "content": f"On day {turn} I went hiking near lake {turn}."}
        )
        transcript.append({"id": f"a{turn}", "role": "assistant", "content": f"Lake {turn} sounds lovely."})

    class CachedProvider:
        model_name = "bench-cached"
        dimensions = 384

        def __init__(self):
            self.cache = {}

        def embed(self, texts):
            return [self.cache.setdefault(t, random_vector(rng)) for t in texts]

    cached = CachedProvider()
    counter = iter(range(10**9))

    def one_extraction():
        run = next(counter)
        candidates = [
            {
                "content": f"Went hiking near lake {i} (run {run}).",
                "source": "user_assertion",
                "evidence": f"I went hiking near lake {i}.",
            }
            for i in range(5)
        ]
        cached.embed([c["content"] for c in candidates])  # Precomputed: not timed below.
        started = time.perf_counter()
        entry_extract(
            agent=extract_agent,
            memory_user=person,
            transcript=transcript,
            candidates=candidates,
            use_llm=False,
            provider=cached,
        )
        return (time.perf_counter() - started) * 1000

    samples = [one_extraction() for _ in range(50)]
    stats = summarize(samples[5:])
    rows.append(("extract 20 turns, 5 candidates, no embed", stats))
    results["extraction"] = stats

    # Batch embedding through the service the task runs, against one call per entry.
    embed_person = MemoryUser.objects.create(workspace=workspace, canonical_id="bench:embed")
    fresh = EpisodicEntry.objects.bulk_create(
        EpisodicEntry(
            workspace=workspace,
            agent=extract_agent,
            memory_user=embed_person,
            content=f"Entry {i}: went hiking near lake {i} with a friend from work.",
            content_hash=f"embed-{i}",
            source="user_assertion",
            evidence="x",
        )
        for i in range(320)
    )
    singles, batch = fresh[:64], fresh[64:]
    started = time.perf_counter()
    for entry in singles:
        entry_embed_batch(entry_ids=[entry.pk], provider=local)
    single_rate = len(singles) / (time.perf_counter() - started)
    started = time.perf_counter()
    entry_embed_batch(entry_ids=[e.pk for e in batch], provider=local)
    batch_rate = len(batch) / (time.perf_counter() - started)
    results["embedding"] = {
        "one_at_a_time_per_s": round(single_rate, 1),
        "batched_per_s": round(batch_rate, 1),
        "speedup": round(batch_rate / single_rate, 2),
        "torch_threads": settings.EMBEDDING_TORCH_THREADS,
    }

    print_table("Episodic memory", rows)
    print(
        f"\nlocal embedding via entry_embed_batch: one entry per call {single_rate:.1f}/s, "
        f"batches of {len(batch)} {batch_rate:.1f}/s "
        f"({batch_rate / single_rate:.1f}x)"
    )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
