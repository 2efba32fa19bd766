"""The review of held facts (docs/review.md): approve (optionally edited), reject, merge.

A held fact is stored closed (facts.models.Fact.review). Each write here is a compare-and-set
on `review = held` under a row lock, so two reviewers acting on one fact at once resolve into
one decision and the other answers 409. Every decision is audited with `review` set to
approved, rejected or merged (webhooks send review.approved, review.rejected, review.merged).
"""

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.access import Principal
from core.errors import ApplicationError
from core.models import AuditEvent
from core.services import audit_record
from facts.models import Fact, FactKey, key_normalize
from facts.services.access import fact_change_authorize
from facts.services.memory_users import facts_people_hold, memory_user_preferences_sync
from facts.services.remember import (
    CONFIRM_RATE,
    FACT_TYPE_UNKNOWN,
    _confidence_validate,
    _fact_audit_payload,
    _invalid,
    _sources_held,
    _value_encode,
    _value_validate,
    fact_search_text,
)

FACT_NOT_HELD = "This fact is not waiting for review (it was approved, rejected or merged already)."
FACT_MERGE_TARGET_NOT_CURRENT = "Merge into a current, approved fact."
FACT_MERGE_TARGET_SELF = "A fact cannot be merged into itself."
FACT_MERGE_OTHER_OWNER = "Merge into a stored fact of the same person and agent."
REVIEW_REASON_TOO_LONG = "At most {limit} characters."
REVIEW_REASON_MAX = 2000


def _held_sources_lock(fact: Fact) -> None:
    """Hold the thread, message and episode the held `fact` cites, as a fact write does before
    it locks any version (facts.services.remember._sources_held). A decision locks the held
    fact and then the key's current version; a thread or episode delete clears the source of
    every fact citing it, in the table's order, and took the current version before the held
    one: each waited for the other. With the source held first, one waits for the other."""
    row = (
        Fact.objects.filter(pk=fact.pk)
        .values("thread_id", "source_message_id", "source_message__thread_id", "source_episode_id")
        .first()
    )
    if row is None:
        return
    _sources_held(
        thread_id=row["thread_id"],
        message_id=row["source_message_id"],
        message_thread_id=row["source_message__thread_id"],
        episode_id=row["source_episode_id"],
    )


def _held_lock(fact: Fact) -> Fact:
    locked = Fact.objects.select_for_update().filter(pk=fact.pk, review=Fact.Review.HELD).first()
    if locked is None:
        raise ApplicationError(FACT_NOT_HELD, code="conflict", status_code=409)
    return locked


def review_reason_clean(reason) -> str:
    reason = (reason or "").strip() if isinstance(reason, str) else ""
    if len(reason) > REVIEW_REASON_MAX:
        message = REVIEW_REASON_TOO_LONG.format(limit=REVIEW_REASON_MAX)
        raise ApplicationError(message, fields={"reason": [message]})
    return reason


def _audit(fact: Fact, *, actor: str, review: str, **extra) -> None:
    audit_record(
        workspace=fact.workspace,
        actor=actor,
        action=AuditEvent.Action.UPDATE,
        entity_type="fact",
        entity_id=fact.pk,
        changes={"key": fact.key, "scope": fact.scope, "review": review, **extra},
    )


def fact_review_approve(
    *,
    fact: Fact,
    actor: str,
    value=None,
    fact_type: str | None = None,
    confidence=None,
    principal: Principal | None = None,
) -> Fact:
    """Open the held `fact` as its key's current version, after the edits given.

    The current version of the key, if any, is superseded by it (as fact_remember does with
    overwrite); when that version already holds the same value it is confirmed instead and the
    held fact is merged into it. The vector is computed after commit (a new value is embedded
    as approved, never the held text). Superseding a global version is a change for every
    agent: an agent-bound key (`principal`) gets a 403 and the fact stays held
    (facts.services.access).
    """
    from facts.tasks import fact_embed_task

    if fact_type is not None and fact_type not in Fact.FactType.values:
        raise _invalid("fact_type", FACT_TYPE_UNKNOWN)
    confidence = _confidence_validate(confidence)
    if value is not None:
        _value_validate(value)
    with transaction.atomic():
        facts_people_hold(fact_ids=[fact.pk])
        _held_sources_lock(fact)
        fact = _held_lock(fact)
        edits = {}
        if value is not None and _value_encode(value) != _value_encode(fact.value):
            edits["value"] = {"from": fact.value, "to": value}
            fact.value = value
            fact.search_text = fact_search_text(fact.key, value)
        for name, new in (("fact_type", fact_type), ("confidence", confidence)):
            if new is not None and getattr(fact, name) != new:
                edits[name] = {"from": getattr(fact, name), "to": new}
                setattr(fact, name, new)
        current = (
            Fact.objects.select_for_update()
            .filter(
                workspace_id=fact.workspace_id,
                key=fact.key,
                scope=fact.scope,
                agent_id=fact.agent_id,
                memory_user_id=fact.memory_user_id,
                thread_id=fact.thread_id,
                valid_to__isnull=True,
            )
            .first()
        )
        if current is not None and _value_encode(current.value) == _value_encode(fact.value):
            fact.save(update_fields=["value", "search_text", "fact_type", "confidence", "updated_at"])
            return _merge_locked(fact, target=current, actor=actor, edits=edits)
        if current is not None:
            fact_change_authorize(fact=current, principal=principal)
        now = timezone.now()
        if current is not None:
            current.valid_to = now
            current.times_contradicted += 1
            current.superseded_by = fact
            current.save(update_fields=["valid_to", "times_contradicted", "superseded_by", "updated_at"])
        fact.valid_from = now
        fact.valid_to = None
        fact.last_confirmed_at = now
        fact.review = Fact.Review.APPROVED
        fact.reviewed_at = now
        fact.reviewed_by = actor
        fact.save()
        FactKey.objects.bulk_create(
            [FactKey(workspace_id=fact.workspace_id, key_normalized=key_normalize(fact.key))],
            ignore_conflicts=True,
        )
        fact_embed_task.delay_on_commit([str(fact.pk)])
        _audit(
            fact,
            actor=actor,
            review="approved",
            **({"edits": edits} if edits else {}),
            **({"previous_id": str(current.pk), "previous_value": current.value} if current else {}),
        )
        if fact.scope == Fact.Scope.USER and (
            fact.fact_type == Fact.FactType.USER_PREFERENCE
            or (current is not None and current.fact_type == Fact.FactType.USER_PREFERENCE)
        ):
            memory_user_preferences_sync(memory_user_ids=[fact.memory_user_id])
    return fact


def fact_review_reject(*, fact: Fact, actor: str, reason: str = "") -> Fact:
    """Keep the held `fact` out of recall for good: it stays stored, rejected with `reason`,
    so the same value proposed again for its key is not held a second time."""
    reason = review_reason_clean(reason)
    with transaction.atomic():
        fact = _held_lock(fact)
        fact.review = Fact.Review.REJECTED
        fact.review_note = reason
        fact.reviewed_at = timezone.now()
        fact.reviewed_by = actor
        fact.save(update_fields=["review", "review_note", "reviewed_at", "reviewed_by", "updated_at"])
        _audit(fact, actor=actor, review="rejected", reason=reason)
    return fact


def fact_review_merge(*, fact: Fact, target: Fact, actor: str) -> Fact:
    """Fold the held `fact` into `target`, a current approved fact of the same workspace: the
    target is confirmed (confidence raised as by a restatement) and gains the held fact's
    evidence; the held fact is kept, merged, pointing at it. Returns the target."""
    if target.pk == fact.pk:
        raise ApplicationError(FACT_MERGE_TARGET_SELF, fields={"into": [FACT_MERGE_TARGET_SELF]})
    with transaction.atomic():
        facts_people_hold(fact_ids=[fact.pk])
        _held_sources_lock(fact)
        fact = _held_lock(fact)
        target = (
            Fact.objects.select_for_update()
            .filter(
                pk=target.pk,
                workspace_id=fact.workspace_id,
                valid_to__isnull=True,
                review=Fact.Review.APPROVED,
            )
            .first()
        )
        if target is None:
            raise ApplicationError(
                FACT_MERGE_TARGET_NOT_CURRENT, fields={"into": [FACT_MERGE_TARGET_NOT_CURRENT]}
            )
        # The target is confirmed with the held fact's evidence: never another person's,
        # agent's, thread's or scope's fact.
        owner = ("scope", "agent_id", "memory_user_id", "thread_id")
        if any(getattr(fact, name) != getattr(target, name) for name in owner):
            raise ApplicationError(FACT_MERGE_OTHER_OWNER, fields={"into": [FACT_MERGE_OTHER_OWNER]})
        return _merge_locked(fact, target=target, actor=actor, edits={})


def _merge_locked(fact: Fact, *, target: Fact, actor: str, edits: dict) -> Fact:
    now = timezone.now()
    evidence = target.evidence
    if fact.evidence and fact.evidence not in evidence:
        evidence = f"{evidence}\n{fact.evidence}".strip()
    raised = target.confidence + (1 - target.confidence) * CONFIRM_RATE
    Fact.objects.filter(pk=target.pk).update(
        times_confirmed=F("times_confirmed") + 1,
        confidence=round(min(1.0, max(raised, fact.confidence)), 6),
        last_confirmed_at=now,
        evidence=evidence,
        updated_at=now,
    )
    fact.review = Fact.Review.MERGED
    fact.superseded_by = target
    fact.reviewed_at = now
    fact.reviewed_by = actor
    fact.save(update_fields=["review", "superseded_by", "reviewed_at", "reviewed_by", "updated_at"])
    _audit(fact, actor=actor, review="merged", into=str(target.pk), **({"edits": edits} if edits else {}))
    audit_record(
        workspace=target.workspace,
        actor=actor,
        action=AuditEvent.Action.UPDATE,
        entity_type="fact",
        entity_id=target.pk,
        changes=_fact_audit_payload(target, outcome="confirmed", merged_from=str(fact.pk)),
    )
    target.refresh_from_db()
    return target
