"""The dedupe and insert of new entries, shared by extraction and direct creation.

An item is a dict holding at least `content` (normal form), `hash`, `source`, `evidence`,
`message_ids` and `metadata`. Each step hands the items it drops to a `reject(item, reason,
**extra)` callback of the caller, so extraction lists them as rejected candidates and
direct creation answers them as duplicates; `extra` may carry `similarity`, `duplicate_of`
(the id of a stored entry) and `twin` (the earlier item of the same call it duplicates).

An item whose most similar stored entry falls below the duplicate threshold but at least at
the conflict floor is consolidated with it (`episodic.services.consolidation`): the decision
rides on the item as `item["decision"]`; a `noop` is handed to `reject` as
`confirmed_existing` with `duplicate_of` and `consolidation` (the decision record), an
`update` or `supersede` closes the stored entry once the new one is inserted, and every
stored entry carries its decision record in `consolidation`.
"""

import hashlib
import logging
from collections.abc import Callable

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from core.embeddings import EmbeddingError, embed_started, embedding_awaited
from core.events import audit_recorded
from core.lib.consolidation import (
    DECISION_ADD,
    DECISION_NOOP,
    REJECT_CONFIRMED,
    REPLACING,
    Decision,
    claim_decide,
    conflict_floor,
)
from core.lib.inserts import rows_insert
from core.lib.rows import ModelRows
from core.models import AuditEvent
from core.ranking import vector_literal
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services.candidates import (
    REJECT_DUPLICATE_HASH,
    REJECT_DUPLICATE_SIMILAR,
    REJECT_LIMIT,
    REJECT_REVIEW_REJECTED,
)
from episodic.services.consolidation import (
    _SOURCE_RANK,
    _noop_confirm,
    _replaced_close,
    _stale,
)

logger = logging.getLogger(__name__)

KEEP_NEAR_DUPLICATES = " Stored anyway: this agent keeps near-duplicates (dedupe_threshold 1.0)."

Reject = Callable[..., None]


# The exact-copy checks run before the lock and again under it on every add: built once, as
# compiling them through the ORM took twice as long as running them (docs/speed.md). The
# workspace leads the (workspace, agent, memory_user, content_hash) index.
_HASHES_SQL = (
    "SELECT content_hash, id{extra} FROM episodes_episodicentry "
    "WHERE workspace_id = %s AND agent_id = %s AND memory_user_id = %s AND content_hash = ANY(%s) AND {state}"
)
_STORED_HASHES_SQL = _HASHES_SQL.format(extra="", state="status = %s AND review = %s")
_REVIEWED_HASHES_SQL = _HASHES_SQL.format(extra=", review", state="review = ANY(%s)")


def _hash_rows(sql: str, *, agent, memory_user, hashes, state: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, [agent.workspace_id, agent.pk, memory_user.pk, list(hashes), *state])
        return cursor.fetchall()


def _stored_hashes(*, agent, memory_user, hashes) -> dict[str, str]:
    """{content hash: id} of the scope's active, approved entries among `hashes`."""
    state = [EpisodicEntry.Status.ACTIVE, EpisodicEntry.Review.APPROVED]
    rows = _hash_rows(_STORED_HASHES_SQL, agent=agent, memory_user=memory_user, hashes=hashes, state=state)
    return {content_hash: str(pk) for content_hash, pk in rows}


def _reviewed_hashes(items, *, agent, memory_user) -> dict[str, tuple[str, str]]:
    """{content hash: (reason, id)} of held and review-rejected entries that the held items
    among `items` repeat: a copy of a held entry is a duplicate, a copy of a rejected one is
    not proposed again. Items not held are stored whatever waits in the queue."""
    hashes = {i["hash"] for i in items if i.get("held")}
    if not hashes:
        return {}
    state = [[EpisodicEntry.Review.HELD, EpisodicEntry.Review.REJECTED]]
    rows = _hash_rows(_REVIEWED_HASHES_SQL, agent=agent, memory_user=memory_user, hashes=hashes, state=state)
    reasons = {
        EpisodicEntry.Review.HELD: REJECT_DUPLICATE_HASH,
        EpisodicEntry.Review.REJECTED: REJECT_REVIEW_REJECTED,
    }
    return {content_hash: (reasons[review], str(pk)) for content_hash, pk, review in rows}


# The nearest active, approved stored entry of the scope for each query vector, found exactly
# (no index: an approximate search could miss the twin), in one query for all the vectors of
# a call. A batch of 100 once made 200 queries (one per item before the lock, one under it).
# A superseded, rejected or held entry is no twin, as for the exact check (`_stored_hashes`):
# near copies of a held entry wait in the queue, where an operator merges them.
#
# The entry's state is read by a scalar subquery on its primary key, never by a join: a vector
# always has its entry (a database cascade), and PostgreSQL runs such a subquery once per row
# with its own plan, a primary-key probe, whatever the statistics say. It cannot turn it into
# a join, as it can an EXISTS. A join with the searchable rows let a planner without
# statistics of the person's rows (a new table, a bulk load before autovacuum's ANALYZE) scan
# the whole `episodes_entry_searchable` index once per vector (61 ms instead of 1.2 for 1,000
# vectors, growing with the square of the scope); the NOT EXISTS anti-join that replaced it
# was once planned, in a test database with dead rows and no statistics, reading ~400 pages
# per vector.
_SCOPE = """
    SELECT v.id AS vector_id, v.entry_id, v.embedding
    FROM episodes_entryembedding v
    WHERE v.agent_id = %(agent)s AND v.memory_user_id = %(memory_user)s AND v.model = %(model)s
      AND v.embedding IS NOT NULL
      AND (
          SELECT e.status = 'active' AND e.review = 'approved'
          FROM episodes_episodicentry e
          WHERE e.id = v.entry_id
      )
"""
# One vector: its NEAREST_STATE_PROBES nearest stored vectors by a plain scan of the scope's
# vectors, then the nearest of those whose entry is active and approved. Only when all of them
# are closed or held (an entry revised that many times) is the whole scope scanned with the
# state check, so the answer is the exact one either way. Probing every row's entry cost 15 of
# the 19 ms of a 4,566-vector scope (13,698 buffers against 1,142 for the vectors alone).
NEAREST_STATE_PROBES = 32
_NEAREST_ROWS = """
    SELECT v.entry_id, v.embedding <=> %(qvec)s::vector AS distance
    FROM episodes_entryembedding v
    WHERE v.agent_id = %(agent)s AND v.memory_user_id = %(memory_user)s AND v.model = %(model)s
      AND v.embedding IS NOT NULL
    ORDER BY v.embedding <=> %(qvec)s::vector
    LIMIT {probes}
"""
_SIMILAR_ONE_SQL = f"""
    WITH nearest AS MATERIALIZED ({_NEAREST_ROWS.format(probes=NEAREST_STATE_PROBES)}),
    hit AS MATERIALIZED (
        SELECT n.entry_id, n.distance
        FROM nearest n
        WHERE (
            SELECT e.status = 'active' AND e.review = 'approved'
            FROM episodes_episodicentry e
            WHERE e.id = n.entry_id
        )
        ORDER BY n.distance
        LIMIT 1
    )
    SELECT 1, entry_id, 1 - distance AS similarity FROM hit
    UNION ALL
    (
        SELECT 1, entry_id, 1 - (embedding <=> %(qvec)s::vector) AS similarity
        FROM ({_SCOPE}) scope
        WHERE NOT EXISTS (SELECT FROM hit)
          AND (SELECT count(*) FROM nearest) = {NEAREST_STATE_PROBES}
        ORDER BY embedding <=> %(qvec)s::vector
        LIMIT 1
    )
"""
# Several vectors: the scope's vectors are read once and compared with all of them in one
# matrix product per chunk. The same question asked in SQL (each vector sorting the
# materialized scope) took 438 ms for 100 vectors against 4,566 stored ones, twice per batch
# call: 45% of a bulk load's time. The read also lists the vector rows of active, approved
# entries it saw, so the check under the lock reads only the others: an entry stored,
# approved, restored, re-embedded or moved to this person meanwhile has a row the first check
# did not list.
#
# The rows come through a BINARY cursor: pgvector's binary form (`vector_send`: a 4-byte
# header and big-endian float4s) arrives as raw bytes, where a text cursor sent each vector as
# hex text twice its size, decoded by the client. The entry's state is not read per row (a
# primary-key probe of the entries for every vector: 40 of the statement's 58 ms at 8,183
# vectors) but from the scope's closed entries, which the partial index
# `episodes_entry_closed` holds alone, read in the same round trip after the cursor is
# declared (so never older than the rows) and left out here. A vector's agent and person are
# its entry's (written with it, moved with it by a merge), so the scope's closed entries are
# all its vectors' closed entries. docs/speed.md, "The batch's scope read".
_SCOPE_CURSOR = "episodic_scope_vectors"
_SCOPE_VECTORS_SQL = """
    SELECT v.id, v.entry_id::text, vector_send(v.embedding)
    FROM episodes_entryembedding v
    WHERE v.agent_id = %(agent)s AND v.memory_user_id = %(memory_user)s AND v.model = %(model)s
      AND v.embedding IS NOT NULL
"""
# The rows the first check did not list (PostgreSQL hashes a long `<> ALL` array: 3.4 ms for
# 5,000 rows against 4,950 listed ids).
_SCOPE_VECTORS_UNSEEN_SQL = _SCOPE_VECTORS_SQL + " AND v.id <> ALL(%(seen)s::bigint[])"
_SCOPE_CLOSED_SQL = """
    SELECT e.id::text FROM episodes_episodicentry e
    WHERE e.agent_id = %(agent)s AND e.memory_user_id = %(memory_user)s
      AND NOT (e.status = 'active' AND e.review = 'approved')
"""
_SCOPE_VECTORS_CHUNK = 4096


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """`matrix` with each row scaled to length 1; a zero row stays zero (no similarity)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def _vector_blocks(rows, closed: set[str]):
    """(vector row ids, entry ids, float32 matrix) of `rows` ((id, entry id, `vector_send`
    bytes)) whose entry is not in `closed`, one block per vector length."""
    if closed:
        rows = [row for row in rows if row[1] not in closed]
    if not rows:
        return
    vector_ids, entry_ids, blobs = zip(*rows, strict=True)
    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    lengths = np.unique(sizes).tolist()
    for size in lengths:
        if len(lengths) == 1:
            ids, chosen, data = list(vector_ids), list(entry_ids), b"".join(blobs)
        else:
            picked = np.flatnonzero(sizes == size).tolist()
            ids, chosen = [vector_ids[i] for i in picked], [entry_ids[i] for i in picked]
            data = b"".join([blobs[i] for i in picked])
        # Past each vector's 4-byte header (dimensions, unused), its big-endian float4s.
        dimensions = (size - 4) // 4
        block = np.ndarray((len(ids), dimensions), dtype=">f4", buffer=data, offset=4, strides=(size, 4))
        yield ids, chosen, block.astype(np.float32)


def _scope_vector_chunks(sql: str, params: dict):
    """(vector row ids, entry ids, float32 matrix) chunks of the vectors `sql` selects whose
    entries are active and approved. Runs in a transaction (the caller's, or its own): a
    cursor declared in one also works behind a transaction pooler (where
    DISABLE_SERVER_SIDE_CURSORS turns Django's WITH HOLD cursors off)."""
    chunk = _SCOPE_VECTORS_CHUNK
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            f"DECLARE {_SCOPE_CURSOR} BINARY NO SCROLL CURSOR FOR {sql};\n"
            f"FETCH FORWARD {chunk} FROM {_SCOPE_CURSOR};\n{_SCOPE_CLOSED_SQL}",
            params,
        )
        cursor.nextset()
        rows = cursor.fetchall()
        cursor.nextset()
        closed = {entry_id for (entry_id,) in cursor.fetchall()}
        while True:
            yield from _vector_blocks(rows, closed)
            if len(rows) < chunk:
                break
            cursor.execute(f"FETCH FORWARD {chunk} FROM {_SCOPE_CURSOR}")
            rows = cursor.fetchall()
        cursor.execute(f"CLOSE {_SCOPE_CURSOR}")


class _Nearest:
    """The most similar of the vector rows seen so far, for each of `vectors`."""

    def __init__(self, vectors):
        self.queries = _unit_rows(np.asarray(vectors, dtype=np.float32))
        self.best = np.full(len(self.queries), -np.inf)
        self.best_ids: list[str | None] = [None] * len(self.queries)

    def add(self, ids: list[str], units: np.ndarray) -> None:
        """Compare with the vector rows of `ids`, scaled to length 1 (`units`)."""
        if units.shape[1] != self.queries.shape[1]:
            return  # Another length under the same model name: no similarity to speak of.
        similarities = self.queries @ units.T
        columns = similarities.argmax(axis=1)
        nearest = similarities[np.arange(len(self.queries)), columns]
        for index in np.flatnonzero(nearest > self.best):
            self.best[index] = nearest[index]
            self.best_ids[index] = ids[columns[index]]

    def found(self) -> list[tuple[str | None, float]]:
        return [
            (entry_id, float(similarity)) if entry_id is not None else (None, 0.0)
            for entry_id, similarity in zip(self.best_ids, self.best, strict=True)
        ]


# How many stored vectors are read ahead while a batch is being embedded (25 MB of 384-d).
_SCOPE_READ_AHEAD = 16_384


def _similar_stored_scan(
    sql: str, params: dict, vectors
) -> tuple[list[tuple[str | None, float]] | None, set[int]]:
    """For each of `vectors`, the nearest of the active vectors `sql` selects; and the rows
    it compared them with.

    `vectors` may be a function that returns them: the rows are read and scaled meanwhile (up
    to `_SCOPE_READ_AHEAD`), so that this work overlaps the embedding. When it returns None,
    nothing is compared and the nearest are None."""
    nearest = None if callable(vectors) else _Nearest(vectors)
    seen: set[int] = set()
    ahead, ahead_rows = [], 0
    for rows_ids, ids, block in _scope_vector_chunks(sql, params):
        seen.update(rows_ids)
        units = _unit_rows(block)
        if nearest is None and ahead_rows < _SCOPE_READ_AHEAD:
            ahead.append((ids, units))
            ahead_rows += len(ids)
            continue
        if nearest is None:
            nearest = _nearest_awaited(vectors, ahead)
            if nearest is None:
                return None, seen
        nearest.add(ids, units)
    if nearest is None:
        nearest = _nearest_awaited(vectors, ahead)
        if nearest is None:
            return None, seen
    return nearest.found(), seen


def _nearest_awaited(vectors_get, ahead) -> _Nearest | None:
    """A `_Nearest` of the vectors `vectors_get` returns (None for None), given the blocks
    read `ahead`."""
    vectors = vectors_get()
    if vectors is None:
        return None
    nearest = _Nearest(vectors)
    for ids, units in ahead:
        nearest.add(ids, units)
    return nearest


def _similar_stored_many(
    *,
    agent,
    memory_user,
    vectors,
    model,
    read_into: set | None = None,
    skip: frozenset = frozenset(),
) -> list[tuple[str | None, float]] | None:
    """For each of `vectors`, the most similar active stored entry of the scope under `model`
    and its similarity ((None, 0.0) when the scope holds none).

    Several vectors, or a `skip`, read the scope's vectors: the ids of the vector rows read
    are added to `read_into`; the rows in `skip` are not read (the check under the lock, after
    a first check that read them). `vectors` may be a function that returns several vectors,
    called once rows are read ahead (`_similar_stored_scan`; None from it: None)."""
    if not callable(vectors) and not vectors:
        return []
    params = {"agent": agent.pk, "memory_user": memory_user.pk, "model": model}
    if callable(vectors) or len(vectors) > 1 or skip:
        sql = _SCOPE_VECTORS_SQL
        if skip:
            # As an array's text: psycopg dumps a list of ints one value at a time in Python
            # (3.6 against 1.0 ms for 5,000 ids).
            sql, params["seen"] = _SCOPE_VECTORS_UNSEEN_SQL, "{" + ",".join(map(str, skip)) + "}"
        found, read = _similar_stored_scan(sql, params, vectors)
        if read_into is not None:
            read_into.update(read)
        return found
    with connection.cursor() as cursor:
        cursor.execute(_SIMILAR_ONE_SQL, {**params, "qvec": vector_literal(vectors[0])})
        row = cursor.fetchone()
    return [(str(row[1]), float(row[2]))] if row else [(None, 0.0)]


def _person_lock(*, agent, memory_user) -> None:
    """Hold a transaction-scoped lock on the (agent, memory user) pair until commit."""
    _person_lock_ids(agent_id=agent.pk, memory_user_id=memory_user.pk)


def _person_lock_ids(*, agent_id, memory_user_id) -> None:
    """`_person_lock` by the pair's ids (an edit holds the entry, not its agent and person)."""
    digest = hashlib.blake2b(f"episodic:{agent_id}:{memory_user_id}".encode(), digest_size=8).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest, "big", signed=True)])


def _cosines(vectors) -> np.ndarray:
    """The cosine similarity of every pair of `vectors` (a batch compared with itself in one
    matrix product: pairwise in Python, a batch of 100 took ~0.5 s)."""
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    scale = np.outer(norms, norms)
    scale[scale == 0] = 1.0
    return (matrix @ matrix.T) / scale


def _dedupe_exact(items, *, agent, memory_user, reject: Reject, known_hashes: dict | None = None) -> list:
    """`items` without exact twins: in `known_hashes` ({hash: the reason to reject with}),
    stored and active, or earlier in `items`."""
    known_hashes = known_hashes or {}
    stored = _stored_hashes(agent=agent, memory_user=memory_user, hashes={i["hash"] for i in items})
    reviewed = _reviewed_hashes(items, agent=agent, memory_user=memory_user)
    first: dict = {}
    unique = []
    for item in items:
        if item["hash"] in known_hashes:
            reject(item, known_hashes[item["hash"]])
        elif item["hash"] in stored:
            reject(item, REJECT_DUPLICATE_HASH, duplicate_of=stored[item["hash"]])
        elif item.get("held") and item["hash"] in reviewed:
            reason, entry_id = reviewed[item["hash"]]
            reject(item, reason, duplicate_of=entry_id)
        elif item["hash"] in first:
            reject(item, REJECT_DUPLICATE_HASH, twin=first[item["hash"]])
        else:
            first[item["hash"]] = item
            unique.append(item)
    return unique


def _dedupe_similar(
    items,
    *,
    agent,
    memory_user,
    provider,
    threshold: float,
    reject: Reject,
    limit: int | None = None,
    check_stored: bool = True,
) -> tuple[list, str]:
    """`items` without near twins (cosine >= `threshold`) among themselves or stored entries,
    capped at `limit`; each kept item carries its `vector`, or, when only the check under the
    lock compares it, the embedding started (`started`). Returns (kept, model).

    The items are embedded in one call and compared with the stored entries in one query.
    An embedding failure skips the similarity check: the items are kept without a vector and
    embedded later by the task (`_entries_insert`).

    Without `check_stored` (and `limit`) the stored entries are not read here: the items are
    compared with them once, under the person's lock (`_drop_stored_meanwhile`), where the
    consolidation of the similar ones is decided too. For callers whose consolidation is
    decided by rule, in microseconds; a model's decision must not be awaited under the lock.
    Several items on the local model are compared here all the same, their stored vectors read
    while they are embedded; under the lock, rows stored since are read to drop copies of them.
    """
    if not check_stored and limit is not None:
        raise ValueError("A limit counts the items left after the stored check: it needs check_stored.")
    if not items:
        return [], ""
    model = provider.model_name
    if not check_stored and len(items) == 1:
        # Compared under the lock only: the local model embeds one text while the lock is
        # taken and the exact copies are checked again, and the vector is awaited after that
        # (`_started_vectors_await`). A batch's embedding takes far longer than that work and
        # would hold the person's lock; an endpoint's is not awaited under it at all.
        started = embed_started(provider, [items[0]["content"]])
        if started is not None:
            items[0]["started"] = started
            items[0]["decide_under_lock"] = True
            return list(items), model
    texts = [i["content"] for i in items]
    # The local model embeds a batch on its own threads while the stored vectors are read
    # (`_similar_stored_scan` awaits it once it has read ahead), so the stored entries are
    # compared here even when consolidation is decided by rule: the read overlaps the
    # embedding, and the check under the lock then reads only rows stored since.
    started = embed_started(provider, texts) if len(items) > 1 else None
    vectors = None

    def vectors_get():
        nonlocal vectors
        try:
            vectors = embedding_awaited(started) if started is not None else provider.embed(texts)
        except EmbeddingError as exc:
            logger.warning("episodic: embedding failed, similarity dedupe skipped: %s", exc)
        return vectors

    if started is None:
        vectors_get()
        if vectors is None:
            return _kept_unembedded(items, reject=reject, limit=limit), model
        if not check_stored:
            for item, vector in zip(items, vectors, strict=True):
                item["vector"] = vector
                item["decide_under_lock"] = True
            return list(items), model
    read: set[int] = set()
    nearest = _similar_stored_many(
        agent=agent,
        memory_user=memory_user,
        vectors=vectors if vectors is not None else vectors_get,
        model=model,
        read_into=read,
    )
    if nearest is None:
        return _kept_unembedded(items, reject=reject, limit=limit), model
    for item, vector in zip(items, vectors, strict=True):
        item["vector"] = vector
    read = frozenset(read)
    kept, candidates = _similar_sort(items, nearest, threshold=threshold, reject=reject, limit=limit)
    for item in kept:
        # The vector rows this check compared it with: the check under the lock skips them.
        item["compared_with"] = read
    _consolidation_decide_many(candidates, agent=agent, threshold=threshold)
    return kept, model


def _kept_unembedded(items, *, reject: Reject, limit: int | None) -> list:
    """`items` (up to `limit`) kept without a vector, after a failed embedding: they are
    embedded later by the task (`_entries_insert`)."""
    kept = items if limit is None else items[:limit]
    for item in items[len(kept) :]:
        reject(item, REJECT_LIMIT)
    return list(kept)


def _similar_sort(items, nearest, *, threshold: float, reject: Reject, limit: int | None = None):
    """(kept, consolidation candidates) of `items` (each with its `vector`), given the most
    similar stored entry of each (`nearest`, as `_similar_stored_many` answers): in order, an
    item is dropped as the near twin of an earlier item kept or of a stored entry, or past
    `limit`; a kept item similar to a stored entry at least at the conflict floor is a
    candidate (item, stored id, similarity)."""
    vectors = [item["vector"] for item in items]
    cosines = _cosines(vectors) if len(vectors) > 1 else None
    kept, kept_index, candidates = [], [], []
    for index, item in enumerate(items):
        twin_index = next((k for k in kept_index if cosines[k, index] >= threshold), None)
        if twin_index is not None:
            similarity = round(float(cosines[twin_index, index]), 4)
            reject(item, REJECT_DUPLICATE_SIMILAR, similarity=similarity, twin=items[twin_index])
            continue
        similar_id, similarity = nearest[index]
        if similar_id is not None and similarity >= threshold:
            reject(item, REJECT_DUPLICATE_SIMILAR, similarity=round(similarity, 4), duplicate_of=similar_id)
            continue
        if limit is not None and len(kept) >= limit:
            reject(item, REJECT_LIMIT)
            continue
        if similar_id is not None and similarity >= min(conflict_floor(), threshold):
            candidates.append((item, similar_id, similarity))
        kept.append(item)
        kept_index.append(index)
    return kept, candidates


# The stored entries a consolidation compares with, by a statement built once: through the ORM
# the lookup took 0.48 ms p50, as a built statement 0.19 (docs/speed.md).
_CANDIDATES = ModelRows(EpisodicEntry, only=("content", "source", "valid_from"))


def _consolidation_decide_many(candidates, *, agent, threshold: float) -> None:
    """Set `item["decision"]` for each (item, similar stored id, similarity) of `candidates`
    (episodic.services.consolidation.entry_consolidation_decide for many items: the stored
    entries are read in one query, not one each)."""
    if not candidates:
        return
    olds = _CANDIDATES.fetch(
        "WHERE id = ANY(%s) AND status = %s",
        [sorted({old_id for _, old_id, _ in candidates}), EpisodicEntry.Status.ACTIVE],
    )
    olds = {str(old.pk): old for old in olds}
    for item, old_id, similarity in candidates:
        old = olds.get(old_id)
        if old is None:
            continue
        decision = claim_decide(
            workspace=agent.workspace,
            old_id=old.pk,
            old_text=old.content,
            new_text=item["content"],
            old_when=f"stored {old.valid_from:%Y-%m-%d}",
            similarity=similarity,
            new_may_replace=_SOURCE_RANK.get(item["source"], 1) >= _SOURCE_RANK.get(old.source, 1),
        )
        if decision.decision == DECISION_NOOP and threshold >= 1.0:
            # This agent keeps near-duplicates (dedupe off): a restatement is stored too.
            decision = Decision(
                DECISION_ADD, decision.reason + KEEP_NEAR_DUPLICATES, decision.by, decision.old, similarity
            )
        item["decision"] = decision


def _drop_stored_meanwhile(kept, *, reject: Reject, agent, memory_user, threshold, model) -> list:
    """`kept` without the items that an entry stored since the first checks now duplicates.

    Items that skipped the first stored check (`decide_under_lock`) read no vector rows, so
    they are compared with all of them here, and sorted as that check would have sorted them
    (`_similar_sort`: an item dropped as a stored entry's near copy takes no later item with
    it); their consolidation with a similar stored entry is decided here (by rule)."""
    stored = _stored_hashes(agent=agent, memory_user=memory_user, hashes={i["hash"] for i in kept})
    reviewed = _reviewed_hashes(kept, agent=agent, memory_user=memory_user)
    unique = []
    for item in kept:
        if item["hash"] in stored:
            reject(item, REJECT_DUPLICATE_HASH, duplicate_of=stored[item["hash"]])
        elif item.get("held") and item["hash"] in reviewed:
            reason, entry_id = reviewed[item["hash"]]
            reject(item, reason, duplicate_of=entry_id)
        else:
            unique.append(item)
    _started_vectors_await(unique)
    with_vector = [item for item in unique if "vector" in item]
    # Items of one call were compared with the same vector rows (none when not compared yet).
    compared = {item.get("compared_with", frozenset()) for item in with_vector}
    nearest = _similar_stored_many(
        agent=agent,
        memory_user=memory_user,
        vectors=[i["vector"] for i in with_vector],
        model=model,
        skip=compared.pop() if len(compared) == 1 else frozenset(),
    )
    if any(item.get("decide_under_lock") for item in with_vector):
        sorted_in, candidates = _similar_sort(with_vector, nearest, threshold=threshold, reject=reject)
        _consolidation_decide_many(candidates, agent=agent, threshold=threshold)
    else:
        sorted_in = []
        for item, (twin_id, similarity) in zip(with_vector, nearest, strict=True):
            if twin_id is not None and similarity >= threshold:
                reject(item, REJECT_DUPLICATE_SIMILAR, similarity=round(similarity, 4), duplicate_of=twin_id)
            else:
                sorted_in.append(item)
    still = {id(item) for item in sorted_in}
    return [item for item in unique if "vector" not in item or id(item) in still]


def _started_vectors_await(items) -> None:
    """Set the `vector` of each of `items` whose embedding `_dedupe_similar` started; one
    that failed is kept without a vector and embedded later, as there."""
    for item in items:
        started = item.pop("started", None)
        if started is None:
            continue
        try:
            (item["vector"],) = embedding_awaited(started)
        except EmbeddingError as exc:
            logger.warning("episodic: embedding failed, similarity dedupe skipped: %s", exc)


def _entries_insert(
    kept, *, agent, memory_user, thread, actor: str, threshold: float, model: str, reject: Reject
) -> list[EpisodicEntry]:
    """Store `kept` as entries, with their vectors when computed; must run inside a transaction.

    The checks before read what was stored before this call began; a second call for the
    same person (another worker, another web process) may have stored the same entries
    since. Serialized per (agent, person) from here to commit, the later one sees the
    earlier one's rows and drops its copies. The embedding call stays outside the lock, but
    one text on the local model may still be running when the lock is taken (a few ms).
    Items without a vector are embedded by `entry_embed_task` once the transaction commits.
    An item's own `thread` wins over `thread`; each stored item gets its entry as `item["entry"]`.
    """
    _person_lock(agent=agent, memory_user=memory_user)
    kept = _drop_stored_meanwhile(
        kept, reject=reject, agent=agent, memory_user=memory_user, threshold=threshold, model=model
    )
    now = timezone.now()
    kept = _noops_confirm(kept, agent=agent, actor=actor, reject=reject, now=now)
    entries = [
        EpisodicEntry(
            workspace=agent.workspace,
            agent=agent,
            memory_user=memory_user,
            content=item["content"],
            content_hash=item["hash"],
            source=item["source"],
            evidence=item["evidence"],
            source_thread=item.get("thread", thread),
            source_message_ids=item["message_ids"],
            metadata=item["metadata"],
            valid_from=now,
            # Written with the row: the vector below is inserted in this transaction, on a row
            # no other transaction can see or edit before it commits.
            embedding_model=model if "vector" in item else "",
            review=EpisodicEntry.Review.HELD if item.get("held") else EpisodicEntry.Review.APPROVED,
        )
        for item in kept
    ]
    for entry, item in zip(entries, kept, strict=True):
        item["entry"] = entry
        decision = item.get("decision")
        # A held entry replaces nothing until it is approved (episodic.services.review). The
        # stored entry is closed before the new one is inserted (its id is known, and the
        # foreign key is checked at commit), so the decision applied is written with the row.
        if decision is not None and decision.decision in REPLACING and not item.get("held"):
            # A stored entry changed meanwhile turns the decision into an `add`.
            decision = _replaced_close(agent=agent, actor=actor, decision=decision, entry=entry, now=now)
        if decision is not None:
            item["decision"] = decision
        entry.consolidation = decision.record(new=entry.pk) if decision is not None else {}
    vectors = [
        EntryEmbedding.of(entry, item["vector"], model=model)
        for entry, item in zip(entries, kept, strict=True)
        if "vector" in item
    ]
    events = [
        AuditEvent(
            workspace=agent.workspace,
            actor=actor,
            action=AuditEvent.Action.CREATE,
            entity_type="episodic_entry",
            entity_id=str(entry.pk),
            changes={
                "source": entry.source,
                **entry.consolidation,
                **({"review": "waiting"} if entry.review == EpisodicEntry.Review.HELD else {}),
            },
        )
        for entry in entries
    ]
    # The entries, their vectors and their create events in one statement (one round trip
    # where three INSERTs took three; docs/speed.md).
    rows_insert((EpisodicEntry, entries), (EntryEmbedding, vectors), (AuditEvent, events))
    without = [str(e.pk) for e, i in zip(entries, kept, strict=True) if "vector" not in i]
    if without:
        from episodic.tasks import entry_embed_task

        entry_embed_task.delay_on_commit(without)
    if events:
        audit_recorded(agent.workspace_id, "episodic_entry")
    return entries


def _noops_confirm(kept, *, agent, actor, reject: Reject, now) -> list:
    """`kept` without the restatements (`noop`), each counted as a confirmation of its stored
    entry; a restatement of an entry closed meanwhile is stored after all (`add`)."""
    still = []
    for item in kept:
        decision = item.get("decision")
        if decision is not None and decision.decision == DECISION_NOOP:
            record = _noop_confirm(agent=agent, actor=actor, decision=decision, now=now)
            if record is not None:
                reject(
                    item,
                    REJECT_CONFIRMED,
                    similarity=decision.similarity,
                    duplicate_of=decision.old,
                    consolidation=record,
                )
                continue
            item["decision"] = _stale(decision)
        still.append(item)
    return still
