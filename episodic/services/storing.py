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

from django.db import connection
from django.utils import timezone

from core.embeddings import EmbeddingError
from core.lib.consolidation import (
    DECISION_ADD,
    DECISION_NOOP,
    REJECT_CONFIRMED,
    REPLACING,
    Decision,
    conflict_floor,
)
from core.ranking import PLAN_EXACT, vector_literal, vector_sql
from core.services import audit_record
from episodic.models import EpisodicEntry
from episodic.services.candidates import (
    REJECT_DUPLICATE_HASH,
    REJECT_DUPLICATE_SIMILAR,
    REJECT_LIMIT,
    REJECT_REVIEW_REJECTED,
)
from episodic.services.consolidation import (
    _noop_confirm,
    _replaced_close,
    _stale,
    entry_consolidation_decide,
)
from episodic.services.embeddings import _entry_vectors_store

logger = logging.getLogger(__name__)

KEEP_NEAR_DUPLICATES = " Stored anyway: this agent keeps near-duplicates (dedupe_threshold 1.0)."

Reject = Callable[..., None]


def _stored_hashes(*, agent, memory_user, hashes) -> dict[str, str]:
    """{content hash: id} of the scope's active, approved entries among `hashes`."""
    rows = EpisodicEntry.objects.filter(
        agent=agent,
        memory_user=memory_user,
        content_hash__in=list(hashes),
        status=EpisodicEntry.Status.ACTIVE,
        review=EpisodicEntry.Review.APPROVED,
    ).values_list("content_hash", "pk")
    return {content_hash: str(pk) for content_hash, pk in rows}


def _reviewed_hashes(items, *, agent, memory_user) -> dict[str, tuple[str, str]]:
    """{content hash: (reason, id)} of held and review-rejected entries that the held items
    among `items` repeat: a copy of a held entry is a duplicate, a copy of a rejected one is
    not proposed again. Items not held are stored whatever waits in the queue."""
    hashes = {i["hash"] for i in items if i.get("held")}
    if not hashes:
        return {}
    rows = EpisodicEntry.objects.filter(
        agent=agent,
        memory_user=memory_user,
        content_hash__in=list(hashes),
        review__in=[EpisodicEntry.Review.HELD, EpisodicEntry.Review.REJECTED],
    ).values_list("content_hash", "pk", "review")
    reasons = {
        EpisodicEntry.Review.HELD: REJECT_DUPLICATE_HASH,
        EpisodicEntry.Review.REJECTED: REJECT_REVIEW_REJECTED,
    }
    return {content_hash: (reasons[review], str(pk)) for content_hash, pk, review in rows}


def _similar_stored(*, agent, memory_user, vector, model) -> tuple[str | None, float]:
    """The most similar active stored entry of the scope under `model`, and its similarity."""
    # A superseded, rejected or held entry is no twin, as for the exact check (`_stored_hashes`):
    # near copies of a held entry wait in the queue, where an operator merges them.
    where = (
        "agent_id = %(agent)s AND memory_user_id = %(memory_user)s AND EXISTS (SELECT 1 FROM "
        "episodes_episodicentry e WHERE e.id = entry_id AND e.status = 'active' AND e.review = 'approved')"
    )
    sql = vector_sql(
        table="episodes_entryembedding", id_column="entry_id", scope_where=where, plan=PLAN_EXACT
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "agent": agent.pk,
                "memory_user": memory_user.pk,
                "qvec": vector_literal(vector),
                "model": model,
                "limit": 1,
            },
        )
        row = cursor.fetchone()
    return (str(row[0]), float(row[1])) if row else (None, 0.0)


def _stored_twin(vector, *, agent, memory_user, model, threshold) -> tuple[str, float] | None:
    """(id, similarity) of a stored entry of the scope at least `threshold` similar, else None."""
    similar_id, similarity = _similar_stored(agent=agent, memory_user=memory_user, vector=vector, model=model)
    if similar_id is None or similarity < threshold:
        return None
    return similar_id, similarity


def _person_lock(*, agent, memory_user) -> None:
    """Hold a transaction-scoped lock on the (agent, memory user) pair until commit."""
    digest = hashlib.blake2b(f"episodic:{agent.pk}:{memory_user.pk}".encode(), digest_size=8).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest, "big", signed=True)])


def _cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5) or 1.0
    )


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
    items, *, agent, memory_user, provider, threshold: float, reject: Reject, limit: int | None = None
) -> tuple[list, str]:
    """`items` without near twins (cosine >= `threshold`) among themselves or stored entries,
    capped at `limit`; each kept item carries its `vector`. Returns (kept, model).

    An embedding failure skips the similarity check: the items are kept without a vector and
    embedded later by the task (`_entries_insert`).
    """
    if not items:
        return [], ""
    model = provider.model_name
    try:
        vectors = provider.embed([i["content"] for i in items])
    except EmbeddingError as exc:
        logger.warning("episodic: embedding failed, similarity dedupe skipped: %s", exc)
        vectors = None
    kept = []
    for index, item in enumerate(items):
        if vectors is not None:
            vector = vectors[index]
            twin = next((k for k in kept if _cosine(k["vector"], vector) >= threshold), None)
            if twin is not None:
                similarity = round(_cosine(twin["vector"], vector), 4)
                reject(item, REJECT_DUPLICATE_SIMILAR, similarity=similarity, twin=twin)
                continue
            similar_id, similarity = _similar_stored(
                agent=agent, memory_user=memory_user, vector=vector, model=model
            )
            if similar_id is not None and similarity >= threshold:
                reject(
                    item, REJECT_DUPLICATE_SIMILAR, similarity=round(similarity, 4), duplicate_of=similar_id
                )
                continue
            if similar_id is not None and similarity >= min(conflict_floor(), threshold):
                decision = entry_consolidation_decide(
                    agent=agent, item=item, old_id=similar_id, similarity=similarity
                )
                if decision is not None and decision.decision == DECISION_NOOP and threshold >= 1.0:
                    # This agent keeps near-duplicates (dedupe off): a restatement is stored too.
                    decision = Decision(
                        DECISION_ADD,
                        decision.reason + KEEP_NEAR_DUPLICATES,
                        decision.by,
                        decision.old,
                        similarity,
                    )
                if decision is not None:
                    item["decision"] = decision
            item["vector"] = vector
        if limit is not None and len(kept) >= limit:
            reject(item, REJECT_LIMIT)
            continue
        kept.append(item)
    return kept, model


def _drop_stored_meanwhile(kept, *, reject: Reject, agent, memory_user, threshold, model) -> list:
    """`kept` without the items that an entry stored since the first checks now duplicates."""
    stored = _stored_hashes(agent=agent, memory_user=memory_user, hashes={i["hash"] for i in kept})
    reviewed = _reviewed_hashes(kept, agent=agent, memory_user=memory_user)
    still = []
    for item in kept:
        if item["hash"] in stored:
            reject(item, REJECT_DUPLICATE_HASH, duplicate_of=stored[item["hash"]])
            continue
        if item.get("held") and item["hash"] in reviewed:
            reason, entry_id = reviewed[item["hash"]]
            reject(item, reason, duplicate_of=entry_id)
            continue
        if "vector" in item:
            twin = _stored_twin(
                item["vector"], agent=agent, memory_user=memory_user, model=model, threshold=threshold
            )
            if twin is not None:
                reject(item, REJECT_DUPLICATE_SIMILAR, similarity=round(twin[1], 4), duplicate_of=twin[0])
                continue
        still.append(item)
    return still


def _entries_insert(
    kept, *, agent, memory_user, thread, actor: str, threshold: float, model: str, reject: Reject
) -> list[EpisodicEntry]:
    """Store `kept` as entries, with their vectors when computed; must run inside a transaction.

    The checks before read what was stored before this call began; a second call for the
    same person (another worker, another web process) may have stored the same entries
    since. Serialized per (agent, person) from here to commit, the later one sees the
    earlier one's rows and drops its copies. The embedding call stays outside the lock.
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
            consolidation=item["decision"].record() if "decision" in item else {},
            review=EpisodicEntry.Review.HELD if item.get("held") else EpisodicEntry.Review.APPROVED,
        )
        for item in kept
    ]
    EpisodicEntry.objects.bulk_create(entries)
    for entry, item in zip(entries, kept, strict=True):
        item["entry"] = entry
        decision = item.get("decision")
        # A held entry replaces nothing until it is approved (episodic.services.review).
        if decision is not None and decision.decision in REPLACING and not item.get("held"):
            decision = _replaced_close(agent=agent, actor=actor, decision=decision, entry=entry, now=now)
        if decision is not None:
            item["decision"] = decision
            entry.consolidation = decision.record(new=entry.pk)
            EpisodicEntry.objects.filter(pk=entry.pk).update(consolidation=entry.consolidation)
    with_vectors = [(e, i["vector"]) for e, i in zip(entries, kept, strict=True) if "vector" in i]
    if with_vectors:
        _entry_vectors_store(
            entries=[e for e, _ in with_vectors], vectors=[v for _, v in with_vectors], model=model
        )
    without = [str(e.pk) for e, i in zip(entries, kept, strict=True) if "vector" not in i]
    if without:
        from episodic.tasks import entry_embed_task

        entry_embed_task.delay_on_commit(without)
    for entry in entries:
        audit_record(
            workspace=agent.workspace,
            actor=actor,
            action="create",
            entity_type="episodic_entry",
            entity_id=entry.pk,
            changes={
                "source": entry.source,
                **entry.consolidation,
                **({"review": "waiting"} if entry.review == EpisodicEntry.Review.HELD else {}),
            },
        )
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
