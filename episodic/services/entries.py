"""Edits and deletes of episodic entries, audited."""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError
from core.services import audit_record
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services.normalize import _truncate, entry_content_hash, entry_normalize

CONTENT_REQUIRED = "Content must not be empty."
SOURCE_UNKNOWN = "Unknown source label."
STATUS_UNKNOWN = "Unknown status."


def _source_clean(source: str) -> str:
    if source not in EpisodicEntry.Source.values:
        raise ApplicationError(SOURCE_UNKNOWN, fields={"source": [SOURCE_UNKNOWN]})
    return source


def entry_update(
    *, entry: EpisodicEntry, actor: str, content=None, status=None, metadata=None, source=None
) -> EpisodicEntry:
    """Edit an entry; a new content is re-hashed and re-embedded (old vectors dropped)."""
    from episodic.tasks import entry_embed_task

    changes = {}
    if content is not None:
        content = _truncate(entry_normalize(content), settings.EPISODIC_MAX_ENTRY_LENGTH)
        if not content:
            raise ApplicationError(CONTENT_REQUIRED, fields={"content": [CONTENT_REQUIRED]})
        if content != entry.content:
            changes["content"] = [entry.content, content]
            entry.content = content
            entry.content_hash = entry_content_hash(content)
            entry.embedding_model = ""
    if status is not None:
        if status not in EpisodicEntry.Status.values:
            raise ApplicationError(STATUS_UNKNOWN, fields={"status": [STATUS_UNKNOWN]})
        if status != entry.status:
            changes["status"] = [entry.status, status]
            if status == EpisodicEntry.Status.SUPERSEDED:
                entry.valid_to = entry.valid_to or timezone.now()
            elif entry.status == EpisodicEntry.Status.SUPERSEDED:
                # Restored by an operator: current again, and replaced by nothing.
                entry.valid_to = None
                entry.superseded_by = None
            entry.status = status
    if source is not None and source != entry.source:
        changes["source"] = [entry.source, _source_clean(source)]
        entry.source = source
    if metadata is not None:
        entry.metadata = metadata
        changes["metadata"] = True
    with transaction.atomic():
        entry.save()
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
