"""Writes of checkpoints and their pending writes (LangGraph's saver operations)."""

import json
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.expressions import RawSQL
from django.utils import timezone

from checkpoints.models import Checkpoint
from core.access import Principal, references_resolve, require_write
from core.errors import ApplicationError, NotFoundError
from core.parsers import JSONRefused, json_check
from core.services import audit_record
from threads.models import Thread

CHECKPOINT_ID_REQUIRED = "checkpoint_id is required."
PARENT_IS_SELF = "A checkpoint cannot be its own parent."
WRITES_REQUIRED = "Send at least one write."
WRITE_IDX_DUPLICATE = "Each write of a task needs its own idx."
CHECKPOINTS_NOT_FOUND = "Some checkpoints were not found; nothing was deleted."
METADATA_NOT_OBJECT = "Metadata must be a JSON object."

# Touching the thread on every put would cost a write per step; once a minute is enough
# to keep an active thread away from the retention purge.
THREAD_TOUCH_INTERVAL = timedelta(minutes=1)

_UPSERT_SQL = """
INSERT INTO checkpoints_checkpoint
    (id, workspace_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
     type, data, metadata, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
    type = EXCLUDED.type,
    data = EXCLUDED.data,
    metadata = EXCLUDED.metadata,
    updated_at = EXCLUDED.updated_at
RETURNING id, created_at, (xmax = 0) AS inserted
"""


def checkpoint_put(
    *,
    thread: Thread,
    checkpoint_id: str,
    type: str,
    data: bytes,
    checkpoint_ns: str = "",
    parent_checkpoint_id: str | None = None,
    metadata: dict | None = None,
) -> tuple[Checkpoint, bool]:
    """Store a checkpoint; putting the same (namespace, id) again replaces it.

    Returns (checkpoint, created). One statement (INSERT ... ON CONFLICT), so concurrent
    puts of the same id never fail or duplicate.
    """
    if not checkpoint_id:
        raise ApplicationError(CHECKPOINT_ID_REQUIRED, fields={"checkpoint_id": [CHECKPOINT_ID_REQUIRED]})
    if parent_checkpoint_id == checkpoint_id:
        raise ApplicationError(PARENT_IS_SELF, fields={"parent_checkpoint_id": [PARENT_IS_SELF]})
    now = timezone.now()
    metadata = metadata or {}
    with connection.cursor() as cursor:
        cursor.execute(
            _UPSERT_SQL,
            [
                uuid.uuid4(),
                thread.workspace_id,
                thread.pk,
                checkpoint_ns,
                checkpoint_id,
                parent_checkpoint_id,
                type,
                bytes(data),
                json.dumps(metadata),
                now,
                now,
            ],
        )
        pk, created_at, inserted = cursor.fetchone()
    if thread.last_activity_at is None or thread.last_activity_at < now - THREAD_TOUCH_INTERVAL:
        Thread.objects.filter(pk=thread.pk, last_activity_at__lt=now - THREAD_TOUCH_INTERVAL).update(
            last_activity_at=now
        )
        thread.last_activity_at = now
    checkpoint = Checkpoint(
        id=pk,
        workspace_id=thread.workspace_id,
        thread_id=thread.pk,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent_checkpoint_id,
        type=type,
        data=bytes(data),
        metadata=metadata,
        created_at=created_at,
        updated_at=now,
    )
    checkpoint._state.adding = False
    return checkpoint, inserted


def checkpoint_writes_put(
    *, checkpoint: Checkpoint, task_id: str, task_path: str = "", writes: list[dict]
) -> int:
    """Store a task's pending writes; returns how many were new.

    Idempotent per (checkpoint, task_id, idx): a retried task does not duplicate its writes.
    As in LangGraph's savers, special writes (negative idx: errors, interrupts) replace the
    stored value, while regular writes keep the first one stored. Within one batch, the last
    write of a special idx wins; a regular idx twice is refused.
    """
    if not writes:
        raise ApplicationError(WRITES_REQUIRED, fields={"writes": [WRITES_REQUIRED]})
    # A task resumed more than once commits one RESUME write per `interrupt()` it replayed,
    # all at idx -4 (langgraph.pregel._runner, `writes.extend(resumes)`); LangGraph's own
    # savers keep the last. One statement cannot upsert a row twice, so collapse them first.
    by_idx: dict[int, dict] = {}
    for w in writes:
        if w["idx"] >= 0 and w["idx"] in by_idx:
            raise ApplicationError(WRITE_IDX_DUPLICATE, fields={"writes": [WRITE_IDX_DUPLICATE]})
        by_idx[w["idx"]] = w
    now = timezone.now()
    values, params = [], []
    for w in by_idx.values():
        values.append("(%s, %s, %s, %s, %s, %s, %s, %s, %s)")
        params += [
            checkpoint.workspace_id,
            checkpoint.pk,
            task_id,
            task_path,
            w["idx"],
            w["channel"],
            w["type"],
            bytes(w["data"]),
            now,
        ]
    # One statement. Regular writes keep the first value stored (DO NOTHING on the conflict);
    # special writes (idx < 0) take the new one. RETURNING reports only rows inserted now.
    sql = f"""
        INSERT INTO checkpoints_checkpointwrite
            (workspace_id, checkpoint_id, task_id, task_path, idx, channel, type, data, created_at)
        VALUES {", ".join(values)}
        ON CONFLICT (checkpoint_id, task_id, idx) DO UPDATE SET
            channel = EXCLUDED.channel, type = EXCLUDED.type, data = EXCLUDED.data,
            task_path = EXCLUDED.task_path
        WHERE EXCLUDED.idx < 0
        RETURNING (xmax = 0)
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return sum(1 for (inserted,) in cursor.fetchall() if inserted)


def checkpoint_metadata_update(*, checkpoint: Checkpoint, metadata: dict, actor: str) -> Checkpoint:
    """Replace a checkpoint's metadata (a curator's correction). The serialized state is the
    client's and stays as it is; a later put of the same id replaces both."""
    if not isinstance(metadata, dict):
        raise ApplicationError(METADATA_NOT_OBJECT, fields={"metadata": [METADATA_NOT_OBJECT]})
    try:
        json_check(metadata)
    except JSONRefused as exc:
        raise ApplicationError(exc.message, fields={"metadata": [exc.message]}) from exc
    if metadata == checkpoint.metadata:
        return checkpoint
    before = sorted(checkpoint.metadata) if isinstance(checkpoint.metadata, dict) else []
    with transaction.atomic():
        checkpoint.metadata = metadata
        checkpoint.save(update_fields=["metadata", "updated_at"])
        audit_record(
            workspace=checkpoint.workspace,
            actor=actor,
            action="update",
            entity_type="checkpoint",
            entity_id=checkpoint.pk,
            changes={"fields": ["metadata"], "keys_before": before, "keys_after": sorted(metadata)},
        )
    return checkpoint


def checkpoint_thread_delete(*, thread: Thread, actor: str = "system") -> dict:
    """Delete all of a thread's checkpoints and their writes."""
    with transaction.atomic():
        _total, by_model = Checkpoint.objects.filter(thread=thread).delete()
        counts = {
            "deleted": by_model.get("checkpoints.Checkpoint", 0),
            "writes": by_model.get("checkpoints.CheckpointWrite", 0),
        }
        if counts["deleted"]:
            audit_record(
                workspace=thread.workspace,
                actor=actor,
                action="delete",
                entity_type="thread_checkpoints",
                entity_id=thread.pk,
                changes=counts,
            )
    return counts


def checkpoints_delete(*, ids, actor: str) -> dict:
    """Delete checkpoints by id with their writes, audited per workspace; no scoping here."""
    from core.models import Workspace

    with transaction.atomic():
        rows = list(Checkpoint.objects.filter(pk__in=ids).values_list("pk", "workspace_id"))
        _total, by_model = Checkpoint.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
        counts = {
            "deleted": by_model.get("checkpoints.Checkpoint", 0),
            "writes": by_model.get("checkpoints.CheckpointWrite", 0),
        }
        by_workspace: dict = {}
        for pk, workspace_id in rows:
            by_workspace.setdefault(workspace_id, []).append(str(pk))
        for workspace_id, deleted_ids in by_workspace.items():
            audit_record(
                workspace=Workspace(pk=workspace_id),
                actor=actor,
                action="delete",
                entity_type="checkpoints",
                entity_id="batch",
                changes={"ids": deleted_ids},
            )
    return counts


def checkpoint_batch_delete(*, principal: Principal, ids) -> dict:
    """Delete checkpoints by id, all or nothing: one id outside the caller's scope is a 404."""
    require_write(principal)
    with transaction.atomic():
        found = references_resolve(
            Checkpoint.objects.only("pk"),
            principal,
            ids,
            agent_field="thread__agent",
            not_found=NotFoundError(CHECKPOINTS_NOT_FOUND),
        )
        return checkpoints_delete(ids=[c.pk for c in found], actor=principal.actor)


# Threads of a person under legal hold, or of one a held person was merged into: nothing of
# theirs is pruned (docs/retention.md), as the retention engine and erasure already say.
_HELD_THREADS_SQL = """
    SELECT t.id FROM threads_thread t JOIN identities_memoryuser u ON u.id = t.memory_user_id
    WHERE u.legal_hold_at IS NOT NULL OR EXISTS (
        SELECT 1 FROM identities_memoryuser m WHERE m.merged_into_id = u.id AND m.legal_hold_at IS NOT NULL
    )
"""

_PRUNE_KEEP_LAST_SQL = f"""
WITH ranked AS (
    SELECT id, row_number() OVER (
        PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id DESC
    ) AS position
    FROM checkpoints_checkpoint
    WHERE thread_id IN (
        SELECT thread_id FROM checkpoints_checkpoint
        GROUP BY thread_id, checkpoint_ns HAVING count(*) > %(keep)s
    ) AND thread_id NOT IN ({_HELD_THREADS_SQL})
)
SELECT id FROM ranked WHERE position > %(keep)s LIMIT %(batch)s
"""


def checkpoints_prune(*, keep_last: int | None = None, ttl_days: int | None = None, now=None) -> int:
    """Apply retention: keep the newest `keep_last` per (thread, namespace), drop older than
    `ttl_days`. Zero turns a rule off. A held person's threads are left whole. Deletes in batches
    of CHECKPOINTS_PRUNE_BATCH."""
    keep_last = settings.CHECKPOINTS_KEEP_LAST if keep_last is None else keep_last
    ttl_days = settings.CHECKPOINTS_TTL_DAYS if ttl_days is None else ttl_days
    batch = settings.CHECKPOINTS_PRUNE_BATCH
    now = now or timezone.now()
    deleted = 0
    if ttl_days > 0:
        cutoff = now - timedelta(days=ttl_days)
        while True:
            expired = Checkpoint.objects.filter(created_at__lt=cutoff).exclude(
                thread_id__in=RawSQL(_HELD_THREADS_SQL, ())
            )
            ids = list(expired.values_list("pk", flat=True)[:batch])
            if not ids:
                break
            deleted += Checkpoint.objects.filter(pk__in=ids).delete()[1].get("checkpoints.Checkpoint", 0)
    if keep_last > 0:
        while True:
            with connection.cursor() as cursor:
                cursor.execute(_PRUNE_KEEP_LAST_SQL, {"keep": keep_last, "batch": batch})
                ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                break
            deleted += Checkpoint.objects.filter(pk__in=ids).delete()[1].get("checkpoints.Checkpoint", 0)
    return deleted
