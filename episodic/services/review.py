"""The review of held episodic entries (docs/review.md): approve (optionally edited), reject, merge.

Each write is a compare-and-set on `review = held` under a row lock, so two reviewers acting
on one entry at once resolve into one decision and the other answers 409. Every decision is
audited with `review` set to approved, rejected or merged (webhooks send review.approved,
review.rejected, review.merged).
"""

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.errors import ApplicationError
from core.lib.consolidation import REPLACING, Decision
from core.services import audit_record
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services.consolidation import _replaced_close
from episodic.services.entries import CONTENT_REQUIRED
from episodic.services.normalize import _truncate, entry_content_hash, entry_normalize

ENTRY_NOT_HELD = "This entry is not waiting for review (it was approved, rejected or merged already)."
ENTRY_MERGE_TARGET_NOT_ACTIVE = "Merge into an active, approved entry of the same agent and person."
ENTRY_MERGE_TARGET_SELF = "An entry cannot be merged into itself."
REVIEW_REASON_TOO_LONG = "At most {limit} characters."
REVIEW_REASON_MAX = 2000
# Evidence kept on a merge target: the quotes of every merged entry, up to this many characters.
MERGED_EVIDENCE_MAX = 8000


def _held_lock(entry: EpisodicEntry) -> EpisodicEntry:
    locked = (
        EpisodicEntry.objects.select_for_update()
        .select_related("workspace", "agent", "memory_user")
        .filter(pk=entry.pk, review=EpisodicEntry.Review.HELD)
        .first()
    )
    if locked is None:
        raise ApplicationError(ENTRY_NOT_HELD, code="conflict", status_code=409)
    return locked


def _reason_clean(reason) -> str:
    reason = (reason or "").strip() if isinstance(reason, str) else ""
    if len(reason) > REVIEW_REASON_MAX:
        message = REVIEW_REASON_TOO_LONG.format(limit=REVIEW_REASON_MAX)
        raise ApplicationError(message, fields={"reason": [message]})
    return reason


def _audit(entry: EpisodicEntry, *, actor: str, review: str, **extra) -> None:
    audit_record(
        workspace=entry.workspace,
        actor=actor,
        action="update",
        entity_type="episodic_entry",
        entity_id=entry.pk,
        changes={"review": review, **extra},
    )


def entry_review_approve(*, entry: EpisodicEntry, actor: str, content: str | None = None) -> EpisodicEntry:
    """Make the held `entry` part of memory (searched, injected), after an optional new content.

    A new content is normalized, re-hashed and re-embedded (its held vectors dropped). An
    entry that consolidation decided should update or supersede a stored one closes that
    one now, if it is still active. An approved entry with the same content already stored
    for the person makes this one a merge into it instead.
    """
    from episodic.tasks import entry_embed_task

    if content is not None:
        content = _truncate(entry_normalize(content), settings.EPISODIC_MAX_ENTRY_LENGTH)
        if not content:
            raise ApplicationError(CONTENT_REQUIRED, fields={"content": [CONTENT_REQUIRED]})
    with transaction.atomic():
        entry = _held_lock(entry)
        edits = {}
        if content is not None and content != entry.content:
            edits["content"] = [entry.content, content]
            entry.content = content
            entry.content_hash = entry_content_hash(content)
            entry.embedding_model = ""
        twin = (
            EpisodicEntry.objects.select_for_update()
            .filter(
                agent_id=entry.agent_id,
                memory_user_id=entry.memory_user_id,
                content_hash=entry.content_hash,
                status=EpisodicEntry.Status.ACTIVE,
                review=EpisodicEntry.Review.APPROVED,
            )
            .first()
        )
        if twin is not None:
            entry.save(update_fields=["content", "content_hash", "embedding_model", "updated_at"])
            return _merge_locked(entry, target=twin, actor=actor, edits=edits)
        now = timezone.now()
        entry.review = EpisodicEntry.Review.APPROVED
        entry.reviewed_at = now
        entry.reviewed_by = actor
        entry.valid_from = now
        entry.save()
        if edits:
            EntryEmbedding.objects.filter(entry=entry).delete()
            entry_embed_task.delay_on_commit([str(entry.pk)])
        decision = _decision_of(entry)
        if decision is not None and decision.decision in REPLACING:
            decision = _replaced_close(
                agent=entry.agent, actor=actor, decision=decision, entry=entry, now=now
            )
            entry.consolidation = decision.record(new=entry.pk)
            EpisodicEntry.objects.filter(pk=entry.pk).update(consolidation=entry.consolidation)
        _audit(entry, actor=actor, review="approved", **({"edits": edits} if edits else {}))
    entry.refresh_from_db(fields=["search_vector", "updated_at"])
    return entry


def _decision_of(entry: EpisodicEntry) -> Decision | None:
    record = entry.consolidation or {}
    if not record.get("decision") or not record.get("old"):
        return None
    return Decision(
        record["decision"],
        record.get("reason", ""),
        record.get("by", ""),
        record["old"],
        record.get("similarity"),
    )


def entry_review_reject(*, entry: EpisodicEntry, actor: str, reason: str = "") -> EpisodicEntry:
    """Keep the held `entry` out of memory for good: stored with status rejected and `reason`,
    so extraction does not hold the same content again (episodic.services.storing)."""
    reason = _reason_clean(reason)
    with transaction.atomic():
        entry = _held_lock(entry)
        entry.review = EpisodicEntry.Review.REJECTED
        entry.status = EpisodicEntry.Status.REJECTED
        entry.review_note = reason
        entry.reviewed_at = timezone.now()
        entry.reviewed_by = actor
        entry.save(
            update_fields=["review", "status", "review_note", "reviewed_at", "reviewed_by", "updated_at"]
        )
        _audit(entry, actor=actor, review="rejected", reason=reason)
    return entry


def entry_review_merge(*, entry: EpisodicEntry, target: EpisodicEntry, actor: str) -> EpisodicEntry:
    """Fold the held `entry` into `target`, an active approved entry of the same agent and
    person: the target counts a confirmation and keeps the held entry's evidence and source
    messages; the held entry is kept, superseded by the target. Returns the target."""
    if target.pk == entry.pk:
        raise ApplicationError(ENTRY_MERGE_TARGET_SELF, fields={"into": [ENTRY_MERGE_TARGET_SELF]})
    with transaction.atomic():
        entry = _held_lock(entry)
        target = (
            EpisodicEntry.objects.select_for_update()
            .filter(
                pk=target.pk,
                agent_id=entry.agent_id,
                memory_user_id=entry.memory_user_id,
                status=EpisodicEntry.Status.ACTIVE,
                review=EpisodicEntry.Review.APPROVED,
            )
            .first()
        )
        if target is None:
            raise ApplicationError(
                ENTRY_MERGE_TARGET_NOT_ACTIVE, fields={"into": [ENTRY_MERGE_TARGET_NOT_ACTIVE]}
            )
        return _merge_locked(entry, target=target, actor=actor, edits={})


def _merge_locked(entry: EpisodicEntry, *, target: EpisodicEntry, actor: str, edits: dict) -> EpisodicEntry:
    now = timezone.now()
    evidence = target.evidence
    if entry.evidence and entry.evidence not in evidence:
        evidence = f"{evidence}\n{entry.evidence}".strip()[:MERGED_EVIDENCE_MAX]
    message_ids = list(dict.fromkeys([*target.source_message_ids, *entry.source_message_ids]))
    EpisodicEntry.objects.filter(pk=target.pk).update(
        times_confirmed=F("times_confirmed") + 1,
        last_confirmed_at=now,
        evidence=evidence,
        source_message_ids=message_ids,
        updated_at=now,
    )
    entry.review = EpisodicEntry.Review.MERGED
    entry.status = EpisodicEntry.Status.SUPERSEDED
    entry.superseded_by = target
    entry.valid_to = now
    entry.reviewed_at = now
    entry.reviewed_by = actor
    entry.save(
        update_fields=[
            "review",
            "status",
            "superseded_by",
            "valid_to",
            "reviewed_at",
            "reviewed_by",
            "updated_at",
        ]
    )
    _audit(entry, actor=actor, review="merged", into=str(target.pk), **({"edits": edits} if edits else {}))
    audit_record(
        workspace=entry.workspace,
        actor=actor,
        action="update",
        entity_type="episodic_entry",
        entity_id=target.pk,
        changes={"confirmed": True, "merged_from": str(entry.pk)},
    )
    target.refresh_from_db()
    return target
