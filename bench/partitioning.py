"""Partitioning layouts of messages and episodic entries, measured on generated data (issue 12).

    python -m bench.partitioning                     # 1M messages, 50k entries: ~5 min on 2 cores
    python -m bench.partitioning --sizes 1000000:50000,5000000:100000   # ~30 min more
    python -m bench.partitioning --sizes 200000:20000 --repeat 20  # a quick run
    python -m bench.partitioning --json bench/results/partitioning.json

Three layouts of `threads_message`, `episodes_episodicentry` and `episodes_entryembedding`,
each in its own schema so every query is the same text under a different `search_path`:

- `plain`: one table each, with the indexes of the real migrations (Django's foreign-key
  indexes included);
- `hash`: `PARTITION BY HASH (workspace_id)`, 16 partitions;
- `range`: `PARTITION BY RANGE (created_at)`, one partition a month (12 months of data).

A partitioned table's primary key and unique constraints must contain the partition key,
so those gain `workspace_id` or `created_at` (which, for `created_at`, makes the message
idempotency constraint meaningless: see docs/deploy.md). Foreign keys are left out of every
layout: they cost on writes, not on the reads measured here.

Data is generated in SQL with generate_series, in creation-time order: `threads_message` has
200 messages per thread on average, threads interleaved over the whole year (long-lived
chats, as a thread is one (agent, person, chat)), 256 workspaces of equal size, parent links
to the previous message of the thread (what the history window walks). Entries use a skewed
workspace (workspace 0 holds ~16 %) and per workspace one person with half its entries, so
one scope is large enough for the HNSW plan. Vectors are random unit 384-d vectors: the
plan and the partition count are measured, not the embedding model. Tsvectors are computed
once in a staging table and copied (the real columns are GENERATED; copying avoids
analysing every text three times).

Queries are sent with client-side parameter binding, as Django sends them, so every
execution is planned with its values (plan-time partition pruning). Each query is timed
`--repeat` times after warm-up; its plan comes from EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON).
"""

import argparse
import json
import os
import statistics
import tempfile
import time

from bench.harness import percentile, write_json

WORKSPACES = 256
HASH_PARTITIONS = 16
MONTHS = 12
MESSAGES_PER_THREAD = 200
THREADS_PER_PERSON = 4
VOCABULARY = 5000
DIMS = 384
MODEL = "all-MiniLM-L6-v2"
# pgvector defaults used by the real index (episodes.models._hnsw_index) and search.
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, POOL = 16, 64, 200, 100
LAYOUTS = ("plain", "hash", "range")

# A word of a Zipf-like vocabulary: w1 is common, w5000 rare, like words of a language.
_WORD = f"'w' || floor(exp(random() * ln({VOCABULARY})))::int"


def _words(count: int) -> str:
    return f"(SELECT string_agg({_WORD}, ' ') FROM generate_series(1, {count}) g WHERE g > n * 0)"


def stage(cur, *, messages: int, entries: int) -> None:
    """Staging tables holding every generated row once (with tsvectors and vectors)."""
    threads = max(1, messages // MESSAGES_PER_THREAD)
    cur.execute("SELECT setseed(0.42)")
    cur.execute("DROP TABLE IF EXISTS stage_thread, stage_message, stage_entry")
    # A person's threads live in one workspace: thread t is in workspace t % W, and threads
    # t, t + W, t + 2W, t + 3W belong to the same person.
    cur.execute(f"""
        CREATE UNLOGGED TABLE stage_thread AS
        SELECT t AS n, md5('t' || t)::uuid AS id, md5('w' || (t % {WORKSPACES}))::uuid AS workspace_id,
               md5('a' || (t % {WORKSPACES}))::uuid AS agent_id,
               md5('u' || (t % {WORKSPACES}) || ':' || (t / {WORKSPACES} / {THREADS_PER_PERSON}))::uuid
                   AS memory_user_id
        FROM generate_series(0, {threads - 1}) t
    """)
    # Message n is in thread n % T at position n / T; its parent is message n - T.
    cur.execute(f"""
        CREATE UNLOGGED TABLE stage_message AS
        SELECT md5('m' || n)::uuid AS id,
               timestamptz '2025-01-01' + (n::float8 / {messages}) * interval '365 days' AS created_at,
               md5('w' || ((n % {threads}) % {WORKSPACES}))::uuid AS workspace_id,
               md5('t' || (n % {threads}))::uuid AS thread_id,
               CASE WHEN (n / {threads}) % 2 = 0 THEN 'user' ELSE 'assistant' END AS role,
               {_words(12)} AS content,
               CASE WHEN n >= {threads} THEN md5('m' || (n - {threads}))::uuid END AS parent_id,
               (n / {threads}) + 1 AS seq, n / {threads} AS depth
        FROM generate_series(0, {messages - 1}) n
    """)
    cur.execute("""
        ALTER TABLE stage_message ADD COLUMN search_tsv tsvector;
        UPDATE stage_message SET search_tsv = to_tsvector('english'::regconfig, role || ': ' || content)
    """)
    cur.execute(f"""
        CREATE UNLOGGED TABLE stage_entry AS
        SELECT n, md5('e' || n)::uuid AS id,
               timestamptz '2025-01-01' + (n::float8 / {entries}) * interval '365 days' AS created_at,
               w, md5('w' || w)::uuid AS workspace_id, md5('a' || w)::uuid AS agent_id,
               md5('eu' || w || ':'
                   || CASE WHEN random() < 0.5 THEN 0 ELSE 1 + floor(random() * 20)::int END)::uuid
                   AS memory_user_id,
               {_words(20)} AS content
        FROM (SELECT n, floor({WORKSPACES} * power(random(), 3))::int AS w
              FROM generate_series(0, {entries - 1}) n) s
    """)
    cur.execute(f"""
        ALTER TABLE stage_entry ADD COLUMN search_vector tsvector, ADD COLUMN embedding vector;
        UPDATE stage_entry SET search_vector = to_tsvector('english'::regconfig, content),
            embedding = l2_normalize(ARRAY(
                SELECT random() - 0.5 FROM generate_series(1, {DIMS}) g WHERE g > n * 0
            )::vector)
    """)
    cur.execute("ANALYZE stage_thread; ANALYZE stage_message; ANALYZE stage_entry")


_MESSAGE_COLUMNS = """
    id uuid NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
    workspace_id uuid NOT NULL, thread_id uuid NOT NULL, role varchar(10) NOT NULL,
    content text NOT NULL, parent_id uuid, metadata jsonb NOT NULL, seq bigint NOT NULL,
    depth integer NOT NULL, jump_id uuid, jump_depth integer NOT NULL, token_count integer NOT NULL,
    branch_tokens bigint NOT NULL, node_id varchar(100) NOT NULL, author_agent varchar(100) NOT NULL,
    delegation_id varchar(100) NOT NULL, name varchar(100) NOT NULL, tool_calls jsonb NOT NULL,
    tool_call_id varchar(100) NOT NULL, files jsonb NOT NULL, idempotency_key varchar(200) NOT NULL,
    archived boolean NOT NULL, search_tsv tsvector
"""
_ENTRY_COLUMNS = """
    id uuid NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
    workspace_id uuid NOT NULL, agent_id uuid NOT NULL, memory_user_id uuid NOT NULL,
    content text NOT NULL, content_hash varchar(64) NOT NULL, source varchar(40) NOT NULL,
    evidence text NOT NULL, source_thread_id uuid, source_message_ids jsonb NOT NULL,
    metadata jsonb NOT NULL, status varchar(12) NOT NULL, embedding_model varchar(200) NOT NULL,
    search_vector tsvector
"""
_EMBEDDING_COLUMNS = """
    id bigint NOT NULL, entry_id uuid NOT NULL, workspace_id uuid NOT NULL, agent_id uuid NOT NULL,
    memory_user_id uuid NOT NULL, model varchar(200) NOT NULL, dimensions integer NOT NULL,
    embedding vector NOT NULL, created_at timestamptz NOT NULL
"""


def _partitioning(layout: str) -> tuple[str, str]:
    """(PARTITION BY clause, the column every unique key must also hold)."""
    if layout == "hash":
        return "PARTITION BY HASH (workspace_id)", "workspace_id"
    if layout == "range":
        return "PARTITION BY RANGE (created_at)", "created_at"
    return "", ""


def _partitions(cur, table: str, layout: str) -> None:
    if layout == "hash":
        for i in range(HASH_PARTITIONS):
            cur.execute(
                f"CREATE TABLE {table}_p{i:02d} PARTITION OF {table} "
                f"FOR VALUES WITH (MODULUS {HASH_PARTITIONS}, REMAINDER {i})"
            )
    elif layout == "range":
        for month in range(MONTHS):
            start = f"2025-{month + 1:02d}-01"
            end = f"2025-{month + 2:02d}-01" if month < 11 else "2026-01-01"
            cur.execute(
                f"CREATE TABLE {table}_m{month + 1:02d} PARTITION OF {table} "
                f"FOR VALUES FROM ('{start}') TO ('{end}')"
            )


def _key(columns: str, extra: str) -> str:
    return f"{columns}, {extra}" if extra else columns


def build_layout(cur, layout: str) -> dict:
    """The three tables of `layout` in schema `layout`, loaded from staging and indexed."""
    by, extra = _partitioning(layout)
    cur.execute(
        f"DROP SCHEMA IF EXISTS {layout} CASCADE; CREATE SCHEMA {layout}; SET search_path = {layout}, public"
    )
    timings = {}
    for table, columns in (
        ("threads_message", _MESSAGE_COLUMNS),
        ("episodes_episodicentry", _ENTRY_COLUMNS),
        ("episodes_entryembedding", _EMBEDDING_COLUMNS),
    ):
        cur.execute(f"CREATE TABLE {table} ({columns}) {by}")
        _partitions(cur, table, layout)
    # The thread table stays one table in every layout: it is small (1 row per 200 messages).
    cur.execute(
        "CREATE TABLE threads_thread AS SELECT id, workspace_id, agent_id, memory_user_id FROM stage_thread"
    )
    cur.execute("ALTER TABLE threads_thread ADD PRIMARY KEY (id)")
    cur.execute("CREATE INDEX threads_identity ON threads_thread (workspace_id, agent_id, memory_user_id)")

    started = time.perf_counter()
    cur.execute("""
        INSERT INTO threads_message
        SELECT id, created_at, created_at, workspace_id, thread_id, role, content, parent_id, '{}',
               seq, depth, NULL, 0, 16, seq * 16, '', '', '', '', '[]', '', '[]', '', false, search_tsv
        FROM stage_message
    """)
    cur.execute(
        """
        INSERT INTO episodes_episodicentry
        SELECT id, created_at, created_at, workspace_id, agent_id, memory_user_id, content, md5(content),
               'user_assertion', 'evidence', NULL, '[]', '{}', 'active', %s, search_vector
        FROM stage_entry
    """,
        [MODEL],
    )
    cur.execute(
        """
        INSERT INTO episodes_entryembedding
        SELECT n + 1, id, workspace_id, agent_id, memory_user_id, %s, %s, embedding, created_at
        FROM stage_entry
    """,
        [MODEL, DIMS],
    )
    timings["load_s"] = time.perf_counter() - started

    started = time.perf_counter()
    statements = [
        # threads.Message: primary key, Django's foreign-key indexes, Meta indexes and constraint.
        f"ALTER TABLE threads_message ADD PRIMARY KEY ({_key('id', extra)})",
        "CREATE INDEX threads_message_workspace_id ON threads_message (workspace_id)",
        "CREATE INDEX threads_message_thread_id ON threads_message (thread_id)",
        "CREATE INDEX threads_message_parent_id ON threads_message (parent_id)",
        "CREATE INDEX threads_message_newest ON threads_message (thread_id, node_id, seq DESC)",
        "CREATE INDEX threads_message_seq ON threads_message (thread_id, seq)",
        f"CREATE UNIQUE INDEX threads_message_idempotency ON threads_message "
        f"({_key('thread_id, idempotency_key', extra)}) WHERE idempotency_key <> ''",
        # episodes.EpisodicEntry
        f"ALTER TABLE episodes_episodicentry ADD PRIMARY KEY ({_key('id', extra)})",
        "CREATE INDEX episodes_entry_workspace_id ON episodes_episodicentry (workspace_id)",
        "CREATE INDEX episodes_entry_agent_id ON episodes_episodicentry (agent_id)",
        "CREATE INDEX episodes_entry_memory_user_id ON episodes_episodicentry (memory_user_id)",
        "CREATE INDEX episodes_entry_scope ON episodes_episodicentry "
        "(workspace_id, agent_id, memory_user_id, created_at DESC)",
        "CREATE INDEX episodes_entry_hash ON episodes_episodicentry "
        "(workspace_id, agent_id, memory_user_id, content_hash)",
        "CREATE INDEX episodes_entry_search ON episodes_episodicentry USING gin (search_vector) "
        "WITH (fastupdate = off)",
        "CREATE INDEX episodes_entry_recent ON episodes_episodicentry (workspace_id, created_at DESC)",
        # episodes.EntryEmbedding
        f"ALTER TABLE episodes_entryembedding ADD PRIMARY KEY ({_key('id', extra)})",
        "CREATE INDEX episodes_entryembedding_entry_id ON episodes_entryembedding (entry_id)",
        "CREATE INDEX episodes_entryembedding_workspace_id ON episodes_entryembedding (workspace_id)",
        "CREATE INDEX episodes_entryembedding_agent_id ON episodes_entryembedding (agent_id)",
        "CREATE INDEX episodes_entryembedding_memory_user_id ON episodes_entryembedding (memory_user_id)",
        f"CREATE UNIQUE INDEX episodes_entry_embedding_unique ON episodes_entryembedding "
        f"({_key('entry_id, model', extra)})",
        "CREATE INDEX episodes_entry_emb_scope ON episodes_entryembedding (agent_id, memory_user_id, model)",
    ]
    for statement in statements:
        cur.execute(statement)
    timings["btree_gin_s"] = time.perf_counter() - started
    started = time.perf_counter()
    cur.execute(f"""
        CREATE INDEX episodes_entry_embedding_hnsw ON episodes_entryembedding
        USING hnsw ((embedding::vector({DIMS})) vector_cosine_ops)
        WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE model = '{MODEL}'
    """)
    timings["hnsw_s"] = time.perf_counter() - started
    cur.execute(
        "VACUUM (ANALYZE) threads_message, episodes_episodicentry, episodes_entryembedding, threads_thread"
    )
    return {k: round(v, 1) for k, v in timings.items()}


def sizes(cur, layout: str) -> dict:
    """Heap and index bytes per table, summed over partitions; HNSW apart."""
    out = {}
    for table in ("threads_message", "episodes_episodicentry", "episodes_entryembedding"):
        # pg_partition_tree lists nothing for a plain table: the table is then its own leaf.
        cur.execute(
            """
            WITH leaves AS (
                SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf
                UNION SELECT %(t)s::regclass
                WHERE (SELECT relkind FROM pg_class WHERE oid = %(t)s::regclass) = 'r'
            )
            SELECT coalesce(sum(pg_table_size(relid)), 0), coalesce(sum(pg_indexes_size(relid)), 0)
            FROM leaves
            """,
            {"t": f"{layout}.{table}"},
        )
        heap, indexes = cur.fetchone()
        out[table] = {"heap_mb": round(heap / 2**20, 1), "indexes_mb": round(indexes / 2**20, 1)}
    cur.execute(
        """
        WITH leaves AS (
            SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf
            UNION SELECT %(t)s::regclass
            WHERE (SELECT relkind FROM pg_class WHERE oid = %(t)s::regclass) = 'r'
        )
        SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0)
        FROM leaves p JOIN pg_index i ON i.indrelid = p.relid
        JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
        WHERE am.amname = 'hnsw'
        """,
        {"t": f"{layout}.episodes_entryembedding"},
    )
    out["episodes_entryembedding"]["hnsw_mb"] = round(cur.fetchone()[0] / 2**20, 1)
    return out


# --- the queries -------------------------------------------------------------------------------

# threads.selectors.branch._WINDOW_SQL without a summary: resolve the newest leaf of the main node,
# then walk parent links, one primary-key lookup per step, until LIMIT rows.
WINDOW_WALK = """
WITH RECURSIVE
leaf AS (SELECT id FROM threads_message WHERE thread_id = %(thread)s AND node_id = '' {ws}
         ORDER BY seq DESC LIMIT 1),
walk AS (
    SELECT m.id, m.parent_id, m.role, m.content, m.created_at, 0 AS steps
    FROM threads_message m JOIN leaf ON m.id = leaf.id WHERE TRUE {wsm}
  UNION ALL
    SELECT m.id, m.parent_id, m.role, m.content, m.created_at, w.steps + 1
    FROM walk w JOIN threads_message m ON m.id = w.parent_id
    WHERE w.steps < 100000 {wsm}
)
SELECT id, role, content FROM walk LIMIT %(limit)s
"""
LATEST_N = """
SELECT id, role, content FROM threads_message
WHERE thread_id = %(thread)s AND node_id = '' {ws} ORDER BY seq DESC LIMIT %(limit)s
"""
# episodes.entry_selectors.message_search_related: the lexical scope (a person's messages
# through their threads) and its match; search_tsv has no GIN index in the real schema.
FTS_MESSAGES_PERSON = """
SELECT m.id FROM threads_message m JOIN threads_thread t ON t.id = m.thread_id
WHERE t.workspace_id = %(workspace)s AND t.agent_id = %(agent)s AND t.memory_user_id = %(person)s
  AND m.role IN ('user', 'assistant') AND m.content <> '' {wsm}
  AND m.search_tsv @@ to_tsquery('english', %(tsq)s)
"""
FTS_ENTRIES_WORKSPACE = """
SELECT id FROM episodes_episodicentry
WHERE workspace_id = %(workspace)s AND search_vector @@ to_tsquery('english', %(tsq)s)
ORDER BY created_at DESC LIMIT 20
"""
# core.ranking.vector_sql, both plans, with entry_selectors' scope (agent, person: no workspace).
VECTOR_EXACT = """
SELECT entry_id, 1 - (embedding <=> %(qvec)s::vector) FROM episodes_entryembedding
WHERE agent_id = %(agent)s AND memory_user_id = %(person)s {ws} AND model = %(model)s
ORDER BY embedding <=> %(qvec)s::vector LIMIT %(limit)s
"""
VECTOR_HNSW = f"""
SELECT entry_id, 1 - ((embedding::vector({DIMS})) <=> %(qvec)s::vector({DIMS})) FROM episodes_entryembedding
WHERE agent_id = %(agent)s AND memory_user_id = %(person)s {{ws}} AND model = %(model)s
ORDER BY (embedding::vector({DIMS})) <=> %(qvec)s::vector({DIMS}) LIMIT %(limit)s
"""
HNSW_SETTINGS = f"SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {HNSW_EF_SEARCH}"
COUNT_ALL = "SELECT count(*) FROM threads_message"
COUNT_RECENT = "SELECT count(*) FROM threads_message WHERE created_at >= timestamptz '2025-12-01'"
RETENTION_DELETE = "DELETE FROM threads_message WHERE created_at < timestamptz '2025-02-01'"
RETENTION_BY_THREADS = "DELETE FROM threads_message WHERE thread_id = ANY(%(threads)s::uuid[]) {ws}"


def _plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def explain(cur, sql: str, params: dict, *, prelude: str = "") -> dict:
    """Partitions scanned, planning and execution ms, shared buffers of one EXPLAIN ANALYZE."""
    cur.execute("BEGIN")
    if prelude:
        cur.execute(prelude)
    cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
    plan = cur.fetchone()[0]
    cur.execute("ROLLBACK")
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]
    relations = set()
    removed = 0
    for node in _plan_nodes(top["Plan"]):
        if "Relation Name" in node and node.get("Actual Loops", 1) > 0:
            relations.add(node["Relation Name"])
        removed += node.get("Subplans Removed", 0)
    root = top["Plan"]
    return {
        "planning_ms": round(top.get("Planning Time", 0.0), 3),
        "execution_ms": round(top.get("Execution Time", 0.0), 3),
        "relations": sorted(relations),
        "subplans_removed": removed,
        "shared_hit": root.get("Shared Hit Blocks", 0),
        "shared_read": root.get("Shared Read Blocks", 0),
    }


def _scanned(relations: list[str], table: str, layout: str) -> str:
    if layout == "plain":
        return "-"
    total = HASH_PARTITIONS if layout == "hash" else MONTHS
    count = sum(1 for r in relations if r.startswith(table + "_"))
    return f"{count}/{total}"


def timed(
    cur, sql: str, params: dict, *, repeat: int, prelude: str = "", rollback: bool = False
) -> list[float]:
    """Milliseconds of `repeat` executions (after 2 warm-ups), each in its own transaction."""
    samples = []
    for i in range(repeat + 2):
        cur.execute("BEGIN")
        if prelude:
            cur.execute(prelude)
        start = time.perf_counter()
        cur.execute(sql, params)
        if cur.description:
            cur.fetchall()
        elapsed = (time.perf_counter() - start) * 1000
        cur.execute("ROLLBACK" if rollback else "COMMIT")
        if i >= 2:
            samples.append(elapsed)
    return samples


def pick_params(cur) -> dict:
    """A typical thread, person and workspace, and the large entry scope, from the plain layout."""
    cur.execute("SET search_path = plain, public")
    # Workspace 7 is a middle-sized one for entries (the skew puts the large ones first).
    cur.execute(
        "SELECT id, workspace_id, agent_id, memory_user_id FROM threads_thread "
        "WHERE workspace_id = md5('w7')::uuid LIMIT 1"
    )
    thread, workspace, agent, person = cur.fetchone()
    cur.execute(
        "SELECT agent_id, memory_user_id, count(*) FROM episodes_entryembedding "
        "GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 1"
    )
    big_agent, big_person, big_count = cur.fetchone()
    cur.execute(
        "SELECT agent_id, memory_user_id, workspace_id, count(*) FROM episodes_entryembedding "
        "WHERE workspace_id = md5('w7')::uuid GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 1"
    )
    small_agent, small_person, small_workspace, small_count = cur.fetchone()
    cur.execute("SELECT workspace_id FROM episodes_entryembedding WHERE agent_id = %s LIMIT 1", [big_agent])
    big_workspace = cur.fetchone()[0]
    cur.execute("SELECT embedding::text FROM stage_entry ORDER BY n DESC LIMIT 1")
    qvec = cur.fetchone()[0]
    # The retention engine (retention.services) deletes one workspace's idle threads, a batch at a time.
    cur.execute(
        "SELECT array_agg(id) FROM (SELECT id FROM threads_thread WHERE workspace_id = md5('w3')::uuid "
        "ORDER BY id LIMIT 200) t"
    )
    threads = [str(t) for t in cur.fetchone()[0]]
    return {
        "thread": thread,
        "workspace": workspace,
        "agent": agent,
        "person": person,
        "big": {"agent": big_agent, "person": big_person, "workspace": big_workspace, "rows": big_count},
        "small": {
            "agent": small_agent,
            "person": small_person,
            "workspace": small_workspace,
            "rows": small_count,
        },
        "qvec": qvec,
        "threads": threads,
    }


def cases(p: dict) -> list[dict]:
    """Every measured query: name, SQL per layout ({ws} filled), parameters, table it reads."""
    ws_m = "AND workspace_id = %(workspace)s"
    wsm_m = "AND m.workspace_id = %(workspace)s"
    base = {"thread": p["thread"], "workspace": p["workspace"], "agent": p["agent"], "person": p["person"]}
    big = {"agent": p["big"]["agent"], "person": p["big"]["person"], "workspace": p["big"]["workspace"]}
    small = {
        "agent": p["small"]["agent"],
        "person": p["small"]["person"],
        "workspace": p["small"]["workspace"],
    }
    vec = {"qvec": p["qvec"], "model": MODEL, "limit": POOL}
    out = []
    for suffix, ws, wsm in (("", "", ""), (" +ws", ws_m, wsm_m)):
        out.append(
            {
                "name": f"window walk, 50 msgs{suffix}",
                "table": "threads_message",
                "sql": WINDOW_WALK.format(ws=ws, wsm=wsm),
                "params": {**base, "limit": 50},
            }
        )
        out.append(
            {
                "name": f"latest 50 of a thread{suffix}",
                "table": "threads_message",
                "sql": LATEST_N.format(ws=ws),
                "params": {**base, "limit": 50},
            }
        )
        out.append(
            {
                "name": f"FTS person's messages{suffix}",
                "table": "threads_message",
                "sql": FTS_MESSAGES_PERSON.format(wsm=wsm),
                "params": {**base, "tsq": "w42 | w77"},
            }
        )
    out.append(
        {
            "name": "FTS workspace entries",
            "table": "episodes_episodicentry",
            "sql": FTS_ENTRIES_WORKSPACE,
            "params": {"workspace": p["workspace"], "tsq": "w42 & w77"},
        }
    )
    for suffix, ws in (("", ""), (" +ws", ws_m)):
        out.append(
            {
                "name": f"vector exact, {p['small']['rows']}-row scope{suffix}",
                "table": "episodes_entryembedding",
                "sql": VECTOR_EXACT.format(ws=ws),
                "params": {**small, **vec},
            }
        )
        out.append(
            {
                "name": f"vector exact, {p['big']['rows']}-row scope{suffix}",
                "table": "episodes_entryembedding",
                "sql": VECTOR_EXACT.format(ws=ws),
                "params": {**big, **vec},
            }
        )
        out.append(
            {
                "name": f"vector HNSW, {p['big']['rows']}-row scope{suffix}",
                "table": "episodes_entryembedding",
                "sql": VECTOR_HNSW.format(ws=ws),
                "params": {**big, **vec},
                "prelude": HNSW_SETTINGS,
                "recall_of": VECTOR_EXACT.format(ws=ws),
            }
        )
    out.append(
        {"name": "admin count(*) all messages", "table": "threads_message", "sql": COUNT_ALL, "params": {}}
    )
    out.append(
        {"name": "admin count last month", "table": "threads_message", "sql": COUNT_RECENT, "params": {}}
    )
    for suffix, ws in (("", ""), (" +ws", "AND workspace_id = md5('w3')::uuid")):
        out.append(
            {
                "name": f"retention: DELETE {len(p['threads'])} threads{suffix}",
                "table": "threads_message",
                "sql": RETENTION_BY_THREADS.format(ws=ws),
                "rollback": True,
                "repeat": 3,
                "params": {"threads": p["threads"]},
            }
        )
    out.append(
        {
            "name": "retention: DELETE oldest month",
            "table": "threads_message",
            "sql": RETENTION_DELETE,
            "params": {},
            "rollback": True,
            "repeat": 3,
        }
    )
    return out


def run_cases(cur, layout: str, params: dict, *, repeat: int) -> dict:
    cur.execute(f"SET search_path = {layout}, public")
    results = {}
    for case in cases(params):
        prelude = case.get("prelude", "")
        reps = case.get("repeat", repeat)
        samples = timed(
            cur,
            case["sql"],
            case["params"],
            repeat=reps,
            prelude=prelude,
            rollback=case.get("rollback", False),
        )
        plan = explain(cur, case["sql"], case["params"], prelude=prelude)
        result = {
            "p50_ms": round(statistics.median(samples), 3),
            "p95_ms": round(percentile(samples, 95), 3),
            "n": len(samples),
            "scanned": _scanned(plan["relations"], case["table"], layout),
            **plan,
        }
        if "recall_of" in case:
            result["recall_at_10"] = _recall(cur, case, prelude)
        results[case["name"]] = result
    results["retention: DETACH+DROP oldest month"] = _drop_partition(cur, layout)
    return results


def _recall(cur, case: dict, prelude: str) -> float:
    """Share of the exact top 10 that the HNSW plan returns in its top 10."""
    cur.execute("BEGIN")
    cur.execute(prelude)
    cur.execute(case["sql"], case["params"])
    approx = [r[0] for r in cur.fetchall()][:10]
    cur.execute("ROLLBACK")
    cur.execute(case["recall_of"], case["params"])
    exact = [r[0] for r in cur.fetchall()][:10]
    return round(len(set(approx) & set(exact)) / max(1, len(exact)), 2)


def _drop_partition(cur, layout: str) -> dict:
    """Removing the oldest month as DDL (range layout only), rolled back after timing."""
    if layout != "range":
        return {"p50_ms": None, "scanned": "-", "n": 0}
    samples = []
    for _ in range(3):
        cur.execute("BEGIN")
        start = time.perf_counter()
        cur.execute("ALTER TABLE threads_message DETACH PARTITION threads_message_m01")
        cur.execute("DROP TABLE threads_message_m01")
        samples.append((time.perf_counter() - start) * 1000)
        cur.execute("ROLLBACK")
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "scanned": f"1/{MONTHS}",
        "n": len(samples),
        "planning_ms": 0,
        "execution_ms": None,
        "shared_hit": 0,
        "shared_read": 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000:50000", help="comma-separated MESSAGES:ENTRIES pairs")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", help="also write the figures here (bench/results/ is not committed)")
    args = parser.parse_args()

    import psycopg

    from core.lib.embedded import start_throwaway_postgres

    url = os.environ.get("DATABASE_URL") or start_throwaway_postgres(
        tempfile.mkdtemp(prefix="memory-bench-pg-")
    )
    conn = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor)
    cur = conn.cursor()
    # One statement per call: ALTER SYSTEM refuses the implicit transaction of a multi-statement string.
    for setting in ("maintenance_work_mem = '1GB'", "max_parallel_maintenance_workers = 1", "jit = off"):
        cur.execute(f"ALTER SYSTEM SET {setting}")
    cur.execute("SELECT pg_reload_conf()")
    cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
    cur.execute("SHOW server_version")
    server_version = cur.fetchone()[0]
    cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    pgvector = cur.fetchone()[0]
    cur.execute("SHOW shared_buffers")
    shared_buffers = cur.fetchone()[0]

    report = {
        "server": server_version,
        "pgvector": pgvector,
        "shared_buffers": shared_buffers,
        "cpus": os.cpu_count(),
        "sizes": [],
    }
    total_started = time.perf_counter()
    for pair in args.sizes.split(","):
        messages, entries = (int(x) for x in pair.split(":"))
        started = time.perf_counter()
        stage(cur, messages=messages, entries=entries)
        size = {
            "messages": messages,
            "entries": entries,
            "stage_s": round(time.perf_counter() - started, 1),
            "layouts": {},
        }
        print(f"staged {messages:,} messages, {entries:,} entries in {size['stage_s']} s", flush=True)
        for layout in LAYOUTS:
            built = build_layout(cur, layout)
            size["layouts"][layout] = {"build": built, "sizes": sizes(cur, layout)}
            print(f"  built {layout}: {built}", flush=True)
        params = pick_params(cur)
        size["scopes"] = {"big_rows": params["big"]["rows"], "small_rows": params["small"]["rows"]}
        for layout in LAYOUTS:
            size["layouts"][layout]["queries"] = run_cases(cur, layout, params, repeat=args.repeat)
            size["layouts"][layout]["loadavg"] = os.getloadavg()
        report["sizes"].append(size)
        print_report(size)
    report["total_s"] = round(time.perf_counter() - total_started, 1)
    report["loadavg_end"] = os.getloadavg()
    print(
        f"\nPostgreSQL {server_version}, pgvector {pgvector}, shared_buffers {shared_buffers}, "
        f"{os.cpu_count()} CPUs; total {report['total_s']} s; load average at end "
        f"{' '.join(f'{x:.2f}' for x in report['loadavg_end'])}"
    )
    write_json(args.json, report)
    conn.close()


def _fmt(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_report(size: dict) -> None:
    layouts = size["layouts"]
    print(
        f"\n### {size['messages']:,} messages, {size['entries']:,} entries "
        f"(large scope {size['scopes']['big_rows']:,} vectors, small {size['scopes']['small_rows']:,})\n"
    )
    print(
        "| query | plain p50 ms | hash p50 ms (x plain) | hash scanned "
        "| range p50 ms (x plain) | range scanned |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in layouts["plain"]["queries"]:
        plain = layouts["plain"]["queries"][name]
        cells = [name, _fmt(plain["p50_ms"])]
        for layout in ("hash", "range"):
            r = layouts[layout]["queries"][name]
            ratio = (r["p50_ms"] / plain["p50_ms"]) if (r["p50_ms"] and plain["p50_ms"]) else None
            cells.append(f"{_fmt(r['p50_ms'])} ({_fmt(ratio)})" if r["p50_ms"] is not None else "-")
            cells.append(r["scanned"])
        print("| " + " | ".join(cells) + " |")
    recalls = {
        lay: {n: q["recall_at_10"] for n, q in layouts[lay]["queries"].items() if "recall_at_10" in q}
        for lay in LAYOUTS
    }
    print(f"\nHNSW recall@10 vs exact: {json.dumps(recalls)}")
    print(
        "\nPlanning ms (p of one EXPLAIN) of the window walk: "
        + ", ".join(
            f"{lay} {layouts[lay]['queries']['window walk, 50 msgs']['planning_ms']}" for lay in LAYOUTS
        )
    )
    print(
        "\n| layout | load s | btree+gin s | hnsw s | messages heap/idx MB | entries heap/idx MB "
        "| embeddings heap/idx MB (hnsw) | load avg |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for lay in LAYOUTS:
        b, s = layouts[lay]["build"], layouts[lay]["sizes"]
        m, e, v = s["threads_message"], s["episodes_episodicentry"], s["episodes_entryembedding"]
        print(
            f"| {lay} | {b['load_s']} | {b['btree_gin_s']} | {b['hnsw_s']} "
            f"| {m['heap_mb']}/{m['indexes_mb']} "
            f"| {e['heap_mb']}/{e['indexes_mb']} | {v['heap_mb']}/{v['indexes_mb']} ({v['hnsw_mb']}) "
            f"| {' '.join(f'{x:.2f}' for x in layouts[lay]['loadavg'])} |"
        )


if __name__ == "__main__":
    main()
