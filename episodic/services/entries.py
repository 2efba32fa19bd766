"""Edits and deletes of episodic entries, audited."""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError, ConflictError, NotFoundError
from core.services import audit_record
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services.candidates import REJECT_DUPLICATE_HASH
from episodic.services.normalize import _truncate, entry_content_hash, entry_normalize
from episodic.services.storing import _person_lock_ids

CONTENT_REQUIRED = "Content must not be empty."
SOURCE_UNKNOWN = "Unknown source label."
STATUS_UNKNOWN = "Unknown status."
EVIDENCE_REQUIRED = "This source needs evidence: an exact quote that proves the entry."
CONTENT_DUPLICATES = "Entry {id} of this agent and person already says this."


def _source_clean(source: str) -> str:
    if source not in EpisodicEntry.Source.values:
        raise ApplicationError(SOURCE_UNKNOWN, fields={"source": [SOURCE_UNKNOWN]})
    return source


def entry_update(
    *, entry: EpisodicEntry, actor: str, content=None, status=None, metadata=None, source=None
) -> EpisodicEntry:
    """Edit an entry; a new content is re-hashed and re-embedded (old vectors dropped).

    The row is read again under its lock and only the edited columns are written: `entry` may
    be older than a consolidation that closed it, a confirmation or a delete, which a whole
    row saved over them would undo (or insert again). An edit that would leave the entry
    active next to an active entry of its (agent, person) with the same normal form is
    refused (409 `duplicate_exact`), as a create answers it with that entry.
    """
    from episodic.selectors import ENTRY_NOT_FOUND
    from episodic.tasks import entry_embed_task

    if content is not None:
        content = _truncate(entry_normalize(content), settings.EPISODIC_MAX_ENTRY_LENGTH)
        if not content:
            raise ApplicationError(CONTENT_REQUIRED, fields={"content": [CONTENT_REQUIRED]})
    if status is not None and status not in EpisodicEntry.Status.values:
        raise ApplicationError(STATUS_UNKNOWN, fields={"status": [STATUS_UNKNOWN]})
    if source is not None:
        _source_clean(source)
    with transaction.atomic():
        # The person's lock before the row's, in the order a create takes them (it closes a
        # replaced entry under the person's lock): the other order could deadlock with it.
        _person_lock_ids(agent_id=entry.agent_id, memory_user_id=entry.memory_user_id)
        locked = (
            EpisodicEntry.objects.select_for_update(of=("self",))
            .select_related("workspace", "agent", "memory_user")
            .filter(pk=entry.pk)
            .first()
        )
        if locked is None:
            raise NotFoundError(ENTRY_NOT_FOUND)
        entry = locked
        changes, written = {}, set()
        if content is not None and content != entry.content:
            changes["content"] = [entry.content, content]
            entry.content = content
            entry.content_hash = entry_content_hash(content)
            entry.embedding_model = ""
            written |= {"content", "content_hash", "embedding_model"}
        if status is not None and status != entry.status:
            changes["status"] = [entry.status, status]
            if status == EpisodicEntry.Status.SUPERSEDED:
                entry.valid_to = entry.valid_to or timezone.now()
            elif entry.status == EpisodicEntry.Status.SUPERSEDED:
                # Restored by an operator: current again, and replaced by nothing.
                entry.valid_to = None
                entry.superseded_by = None
            entry.status = status
            written |= {"status", "valid_to", "superseded_by"}
        if source is not None and source != entry.source:
            if source != EpisodicEntry.Source.AGENT_DIRECT and not entry.evidence:
                # As a create refuses it: only `agent_direct` stands without a quote.
                raise ApplicationError(EVIDENCE_REQUIRED, fields={"source": [EVIDENCE_REQUIRED]})
            changes["source"] = [entry.source, source]
            entry.source = source
            written.add("source")
        if metadata is not None:
            entry.metadata = metadata
            changes["metadata"] = True
            written.add("metadata")
        if {"content", "status"} & changes.keys():
            _twin_refuse(entry, field="content" if "content" in changes else "status")
        if written:
            entry.save(update_fields=[*sorted(written), "updated_at"])
        if "content" in changes:
            EntryEmbedding.objects.filter(entry=entry).delete()
            entry_embed_task.delay_on_commit([str(entry.pk)])
        if changes:
            audit_record(
                workspace=entry.workspace,
                actor=actor,
                action="update",
                entity_type="episodic_entry",
                entity_id=entry.pk,
                changes={k: v for k, v in changes.items() if k != "metadata"},
            )
    entry.refresh_from_db(fields=["search_vector", "updated_at"])
    return entry


def _twin_refuse(entry: EpisodicEntry, *, field: str) -> None:
    """ConflictError when `entry`, active and approved, repeats another such entry of its pair."""
    if entry.status != EpisodicEntry.Status.ACTIVE or entry.review != EpisodicEntry.Review.APPROVED:
        return
    twin = (
        EpisodicEntry.objects.filter(
            workspace_id=entry.workspace_id,
            agent_id=entry.agent_id,
            memory_user_id=entry.memory_user_id,
            content_hash=entry.content_hash,
            status=EpisodicEntry.Status.ACTIVE,
            review=EpisodicEntry.Review.APPROVED,
        )
        .exclude(pk=entry.pk)
        .values_list("pk", flat=True)
        .first()
    )
    if twin is not None:
        message = CONTENT_DUPLICATES.format(id=twin)
        raise ConflictError(message, code=REJECT_DUPLICATE_HASH, fields={field: [message]})


def entry_delete(*, entry: EpisodicEntry, actor: str) -> None:
    with transaction.atomic():
        audit_record(
            workspace=entry.workspace,
            actor=actor,
            action="delete",
            entity_type="episodic_entry",
            entity_id=entry.pk,
        )
        entry.delete()


def entries_delete(*, queryset, workspace, actor: str) -> list[str]:
    """Delete the entries of `queryset` with one audit event each; returns their ids."""
    with transaction.atomic():
        found = [str(pk) for pk in queryset.values_list("pk", flat=True)]
        EpisodicEntry.objects.filter(pk__in=found).delete()
        for pk in found:
            audit_record(
                workspace=workspace,
                actor=actor,
                action="delete",
                entity_type="episodic_entry",
                entity_id=pk,
            )
    return found


def entry_batch_delete(*, principal: Principal, ids) -> dict:
    """Delete the principal's entries among `ids`; ids it cannot see are reported missing."""
    queryset = scope_to_principal(EpisodicEntry.objects.filter(pk__in=ids), principal)
    found = entries_delete(queryset=queryset, workspace=principal.workspace, actor=principal.actor)
    missing = sorted({str(i) for i in ids} - set(found))
    return {"deleted": len(found), "not_found": missing}


# The target's active, approved entries that repeat an older one of the same agent word for
# word (same hash): each closed as superseded by the oldest, which counts them as confirmations.
_MERGE_TWINS_SQL = """
WITH ranked AS (
    SELECT id, first_value(id) OVER w AS kept, row_number() OVER w AS position
    FROM episodes_episodicentry
    WHERE memory_user_id = %(target)s AND status = 'active' AND review = 'approved'
    WINDOW w AS (PARTITION BY agent_id, content_hash ORDER BY created_at, id)
), closed AS (
    UPDATE episodes_episodicentry e
    SET status = 'superseded', valid_to = %(now)s, superseded_by_id = r.kept, updated_at = %(now)s
    FROM ranked r
    WHERE e.id = r.id AND r.position > 1
    RETURNING e.id, e.superseded_by_id
), confirmed AS (
    UPDATE episodes_episodicentry e
    SET times_confirmed = e.times_confirmed + c.copies, last_confirmed_at = %(now)s, updated_at = %(now)s
    FROM (SELECT superseded_by_id AS id, count(*) AS copies FROM closed GROUP BY 1) c
    WHERE e.id = c.id
)
SELECT id::text, superseded_by_id::text FROM closed
"""


def memory_user_entries_merge(*, source, target, now) -> dict:
    """Move `source`'s entries to `target` (core.holdings, in the merge's transaction).

    Two people who told an agent the same thing would otherwise leave two current copies of
    it, recalled and injected twice: the later copy is closed as superseded by the earlier one,
    which counts it as a confirmation (as a restatement is counted), and the close is audited.
    """
    from django.db import connection

    moved = EpisodicEntry.objects.filter(memory_user=source).update(memory_user=target, updated_at=now)
    if not moved:
        return {"episodic_entries": 0}
    with connection.cursor() as cursor:
        cursor.execute(_MERGE_TWINS_SQL, {"target": target.pk, "now": now})
        closed = cursor.fetchall()
    for entry_id, kept in closed:
        audit_record(
            workspace=target.workspace,
            actor="system",
            action="update",
            entity_type="episodic_entry",
            entity_id=entry_id,
            changes={"status": ["active", "superseded"], "merged_people": True, "superseded_by": kept},
        )
    return {"episodic_entries": moved}
