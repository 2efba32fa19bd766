"""The fused order of a fixed data set does not move (issue 17).

The search path's SQL is batched and rearranged for speed; the ranking it feeds must stay
the same. EXPECTED was produced by core/ranking.py before that change (commit 0460be4) on
the data set built below: 240 entries of one person (seeded words, seeded 384-d vectors,
fixed dates and ids, every third entry from one of four threads so the session term takes part)
and six queries. Any change to which rows are fetched, their BM25 or their similarity
shows up here as a different order or score.
"""

import threading
import uuid
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from unittest import mock

import numpy as np
import psycopg
from django.db import OperationalError, connection, transaction
from django.test import TransactionTestCase, override_settings

from core import ranking
from core.lib import side_reads
from core.ranking import DEFAULT_WEIGHTS, PLAN_EXACT
from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.selectors import entry_search_hybrid
from episodic.tests.factories import memory_user_factory
from threads.tests.factories import make_thread

MODEL = "golden-test-384"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
WORDS_TEXT = (
    "lisbon marathon cat miso porto sister window seat coffee train hiking lake guitar "
    "concert bakery sourdough garden tomato chess club novel library museum painting "
    "dentist appointment birthday party cousin wedding flight tokyo ramen sushi bicycle "
    "repair kitchen oven recipe yoga morning swim pool budget salary promotion meeting"
)
WORDS = WORDS_TEXT.split()
QUERIES = [
    "How is the marathon training going?",
    "what did she say about the cat and porto",
    "sourdough bakery recipe",
    "flight to tokyo in 2025",
    "chess club meeting morning",
    "garden tomato guitar concert wedding",
]


def build(workspace, agent, person) -> None:
    rng = np.random.default_rng(19)
    threads = [make_thread(workspace=workspace, agent=agent, memory_user=person) for _ in range(4)]
    entries = []
    for i in range(240):
        words = rng.choice(WORDS, size=int(rng.integers(4, 12)))
        content = f"entry {i}: " + " ".join(words)
        entries.append(
            EpisodicEntry(
                # Seeded ids: BM25 breaks score ties by id, which decides the pool's edge.
                id=uuid.UUID(bytes=rng.bytes(16)),
                workspace=workspace,
                agent=agent,
                memory_user=person,
                content=content,
                content_hash=f"golden-{i}",
                source="user_assertion",
                evidence=content,
                source_thread=threads[i % 4] if i % 3 == 0 else None,
                created_at=NOW - timedelta(days=3 * i + 1),
                valid_from=NOW - timedelta(days=3 * i + 1),
            )
        )
    EpisodicEntry.objects.bulk_create(entries)
    # bulk_create keeps created_at only if auto_now_add is off: set it explicitly.
    for entry in entries:
        EpisodicEntry.objects.filter(pk=entry.pk).update(created_at=entry.created_at)
    vectors = rng.normal(size=(240, 384))
    EntryEmbedding.objects.bulk_create(
        EntryEmbedding(
            entry=entry,
            workspace=workspace,
            agent=agent,
            memory_user=person,
            model=MODEL,
            dimensions=384,
            embedding=(vector / np.linalg.norm(vector)).tolist(),
        )
        for entry, vector in zip(entries[:200], vectors, strict=False)  # 40 without a vector yet.
    )


def query_vector(index: int) -> list[float]:
    vector = np.random.default_rng(100 + index).normal(size=384)
    return (vector / np.linalg.norm(vector)).tolist()


def ranked(agent, person) -> list[list]:
    """Per query: (entry number, score to 6 places) of the top 15, best first."""
    out = []
    for index, query in enumerate(QUERIES):
        result = entry_search_hybrid(
            agent=agent,
            memory_user=person,
            query=query,
            query_vector=query_vector(index),
            model=MODEL,
            top_k=15,
            now=NOW,
            # The weights EXPECTED was made with (a pool of 100): this pins how the SQL feeds
            # the fusion, not the tuning of the entries' default (ENTRY_WEIGHTS).
            weights=DEFAULT_WEIGHTS,
        )
        assert result.plan == PLAN_EXACT
        out.append([[int(h.entry.content.split(":")[0].split()[1]), round(h.score, 6)] for h in result.hits])
    return out


EXPECTED = [
    [
        [90, 1.566972],
        [51, 1.337049],
        [210, 1.041248],
        [60, 1.000815],
        [138, 0.984777],
        [77, 0.974291],
        [189, 0.96411],
        [18, 0.942147],
        [72, 0.793014],
        [153, 0.755596],
        [146, 0.73989],
        [195, 0.712663],
        [78, 0.705876],
        [65, 0.686804],
        [164, 0.677776],
    ],
    [
        [57, 1.196397],
        [156, 1.187328],
        [0, 1.17616],
        [93, 1.06629],
        [16, 1.045674],
        [21, 0.91857],
        [10, 0.81177],
        [87, 0.730406],
        [167, 0.711755],
        [132, 0.677603],
        [120, 0.626164],
        [35, 0.612156],
        [192, 0.602508],
        [81, 0.559506],
        [149, 0.555157],
    ],
    [
        [36, 1.308225],
        [48, 1.197783],
        [66, 1.029765],
        [177, 0.980292],
        [189, 0.977877],
        [186, 0.938584],
        [120, 0.849106],
        [81, 0.837808],
        [98, 0.809934],
        [60, 0.749076],
        [198, 0.713787],
        [182, 0.697157],
        [56, 0.694116],
        [117, 0.685809],
        [184, 0.653903],
    ],
    [
        [105, 2.476143],
        [57, 2.41688],
        [140, 2.173355],
        [81, 2.043954],
        [100, 1.891968],
        [62, 1.798919],
        [98, 1.644993],
        [135, 1.616417],
        [147, 1.575849],
        [85, 1.575585],
        [162, 1.563864],
        [138, 1.547027],
        [117, 1.532331],
        [165, 1.507317],
        [60, 1.506932],
    ],
    [
        [130, 1.412833],
        [69, 1.351848],
        [117, 1.341786],
        [65, 0.941091],
        [45, 0.940239],
        [25, 0.930267],
        [96, 0.892231],
        [177, 0.865718],
        [172, 0.841835],
        [165, 0.825156],
        [108, 0.799082],
        [123, 0.771994],
        [147, 0.749431],
        [90, 0.715163],
        [126, 0.705731],
    ],
    [
        [26, 1.227992],
        [0, 1.134772],
        [132, 1.057973],
        [129, 1.018816],
        [141, 1.016867],
        [164, 0.958668],
        [117, 0.953026],
        [108, 0.906223],
        [76, 0.867698],
        [44, 0.850492],
        [53, 0.730021],
        [152, 0.724894],
        [192, 0.685542],
        [128, 0.67563],
        [48, 0.672541],
    ],
]


class FusedOrderTests(MemoryTestCase):
    def test_fused_order_of_a_fixed_data_set_is_unchanged(self):
        person = memory_user_factory(self.workspace)
        build(self.workspace, self.agent, person)
        assert ranked(self.agent, person) == EXPECTED


def late(vector: list[float], sent: list) -> tuple[Future, object]:
    """A Future of `vector`, pending when the search starts, and a statement wrapper that
    finishes it once the search's first statement has run; each statement is recorded in
    `sent` with whether the vector was there when it was sent."""
    future: Future = Future()

    def wrapper(execute, sql, params, many, context):
        sent.append((sql, future.done()))
        result = execute(sql, params, many, context)
        if not future.done():
            future.set_result(vector)
        return result

    return future, wrapper


class LateQueryVectorTests(MemoryTestCase):
    """The local model's query vector is computed on another thread (`query_vector_for`):
    BM25 is sent meanwhile, and nothing ranks differently for it."""

    def test_the_fused_order_is_the_same_when_the_vector_arrives_after_bm25(self):
        person = memory_user_factory(self.workspace)
        build(self.workspace, self.agent, person)
        out = []
        for index, query in enumerate(QUERIES):
            sent: list = []
            future, wrapper = late(query_vector(index), sent)
            with connection.execute_wrapper(wrapper):
                result = entry_search_hybrid(
                    agent=self.agent,
                    memory_user=person,
                    query=query,
                    query_vector=future,
                    model=MODEL,
                    top_k=15,
                    now=NOW,
                    weights=DEFAULT_WEIGHTS,
                )
            (first, vector_there), *rest = sent
            # BM25 went alone while the vector was pending; the vector statements after it.
            assert not vector_there and "tsv" in first and "<=>" not in first
            assert any("<=>" in sql for sql, _ in rest) and all(there for _, there in rest)
            assert result.plan == PLAN_EXACT
            out.append(
                [[int(h.entry.content.split(":")[0].split()[1]), round(h.score, 6)] for h in result.hits]
            )
        assert out == EXPECTED


class BM25BesideTests(TransactionTestCase):
    """A large scope's BM25 goes to a side connection (core.lib.side_reads) while the request's
    own finds the vector candidates; the ranking is the one EXPECTED pins, whichever
    connection read it. Committed rows: the side connections cannot see a test's transaction."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.person = memory_user_factory(self.workspace)
        build(self.workspace, self.agent, self.person)
        ranking._scope_sizes.clear()
        self.addCleanup(ranking._scope_sizes.clear)
        # The scope (200 vectors) counts as large.
        beside = override_settings(SIDE_READ_THREADS=2, SEARCH_BM25_BESIDE_MIN_ROWS=100)
        beside.enable()
        self.addCleanup(beside.disable)

    def record_side_reads(self) -> list:
        seen = []
        original = side_reads._in_pool_thread

        def recording(fn, kwargs, slots):
            seen.append((fn.__name__, threading.current_thread().name, "tsv" in kwargs.get("sql", "")))
            return original(fn, kwargs, slots)

        side_reads._in_pool_thread = recording
        self.addCleanup(setattr, side_reads, "_in_pool_thread", original)
        return seen

    def test_bm25_read_beside_ranks_as_before(self):
        with override_settings(SIDE_READ_THREADS=0):
            assert ranked(self.agent, self.person) == EXPECTED  # Counts the scope, as a first search does.
        seen = self.record_side_reads()
        assert ranked(self.agent, self.person) == EXPECTED
        assert len(seen) == len(QUERIES)
        assert all(
            name == "_rows_read" and thread.startswith(side_reads.THREAD_PREFIX) and bm25
            for name, thread, bm25 in seen
        )

    def test_a_never_counted_scope_reads_bm25_beside_while_it_is_counted(self):
        """On a model with an HNSW index the plan waits for the scope's count: the BM25 goes
        beside meanwhile, from the first search of the scope."""
        seen = self.record_side_reads()
        counted = []
        count = ranking._scope_size

        def counting(*args, **kwargs):
            counted.append(len(seen))
            return count(*args, **kwargs)

        with (
            mock.patch.dict(ranking.HNSW_MODELS, {MODEL: 384}),
            mock.patch.object(ranking, "_scope_size", counting),
        ):
            assert ranked(self.agent, self.person) == EXPECTED
        assert len(seen) == len(QUERIES)
        assert counted == [1]  # The first search counted, with its BM25 already sent beside.

    def test_a_side_thread_freed_during_the_count_takes_the_bm25(self):
        """No side thread was free as the search began; one is once the scope is counted."""
        seen = self.record_side_reads()
        slots = side_reads.side_pool_slots()
        taken = 0
        while slots.acquire(blocking=False):
            taken += 1
        count = ranking._scope_size

        def counting_then_freeing(*args, **kwargs):
            nonlocal taken
            size = count(*args, **kwargs)
            for _ in range(taken):
                slots.release()
            taken = 0
            return size

        try:
            with (
                mock.patch.dict(ranking.HNSW_MODELS, {MODEL: 384}),
                mock.patch.object(ranking, "_scope_size", counting_then_freeing),
            ):
                assert ranked(self.agent, self.person) == EXPECTED
        finally:
            for _ in range(taken):
                slots.release()
        assert len(seen) == len(QUERIES)

    def test_small_scopes_and_open_transactions_read_on_the_request_connection(self):
        seen = self.record_side_reads()
        with override_settings(SEARCH_BM25_BESIDE_MIN_ROWS=1000):
            assert ranked(self.agent, self.person) == EXPECTED
            assert ranked(self.agent, self.person) == EXPECTED
        with transaction.atomic():
            assert ranked(self.agent, self.person) == EXPECTED
        assert seen == []

    def test_nothing_waits_for_a_busy_pool(self):
        """With every side thread taken by other requests, the BM25 runs in the request's
        own round trip instead of queueing."""
        with override_settings(SIDE_READ_THREADS=0):
            ranked(self.agent, self.person)
        seen = self.record_side_reads()
        slots = side_reads.side_pool_slots()
        taken = 0
        while slots.acquire(blocking=False):
            taken += 1
        try:
            assert ranked(self.agent, self.person) == EXPECTED
        finally:
            for _ in range(taken):
                slots.release()
        assert taken == 2 and seen == []

    def test_a_failed_side_connection_reads_on_the_request_connection(self):
        """A side connection that cannot be had (the server refuses one more, say) costs the
        search its overlap, not its answer."""
        with override_settings(SIDE_READ_THREADS=0):
            ranked(self.agent, self.person)

        def refused(**kwargs):
            raise OperationalError("sorry, too many clients already")

        with (
            mock.patch.object(ranking, "_rows_read", refused),
            self.assertLogs("core.ranking", "WARNING") as logs,
        ):
            assert ranked(self.agent, self.person) == EXPECTED
        assert len(logs.records) == len(QUERIES)
        assert "side connection failed" in logs.output[0]

    def test_a_statement_that_ran_out_of_time_beside_is_not_run_again(self):
        """Its own time limit (a web request's statement_timeout) ended it: the same statement
        on the request's connection would only take as long again."""
        with override_settings(SIDE_READ_THREADS=0):
            ranked(self.agent, self.person)

        def cancelled(**kwargs):
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = 1; SELECT pg_sleep(1)")

        sent = []
        with (
            mock.patch.object(ranking, "_rows_read", cancelled),
            connection.execute_wrapper(lambda execute, sql, *args: sent.append(sql) or execute(sql, *args)),
            self.assertRaises(OperationalError) as raised,
        ):
            ranked(self.agent, self.person)
        assert isinstance(raised.exception.__cause__, psycopg.errors.QueryCanceled)
        assert not any("tsv" in sql for sql in sent)
