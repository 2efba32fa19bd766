"""Remembering and editing facts. A value is never overwritten in place: it is superseded by a
new version.

Confidence on confirmation (the same value remembered again):
    c' = max(c + (1 - c) * CONFIRM_RATE, c_given)      with CONFIRM_RATE = 0.2
so 0.6 -> 0.68 -> 0.744 -> ...; it approaches 1 and never exceeds it.
"""

import json
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core.access import Principal
from core.errors import ApplicationError, NotFoundError
from core.lib.consolidation import DECISION_NOOP, REPLACING
from core.memory_settings import review_holds
from core.models import AuditEvent
from core.services import AgentRegisteredMeanwhile, agent_pending_store, audit_record
from facts.models import Fact, FactKey, key_normalize
from facts.services.access import fact_change_authorize, fact_global_writer_agent
from facts.services.consolidation import (
    _fact_close,
    _fact_cross_key_old,
    _fact_noop_confirm,
    fact_cross_key_decide,
)
from facts.services.consolidation import _stale as _cross_key_stale
from facts.services.memory_users import memory_user_preferences_sync
from identities.selectors import memory_user_resolve_merged
from identities.services import memory_users_hold
from threads.models import Thread

CONFIRM_RATE = 0.2
# Starting confidence when the caller gives none: an operator is trusted most, an
# extractor's guess least.
DEFAULT_CONFIDENCE = {
    Fact.Source.OPERATOR: 1.0,
    Fact.Source.API: 0.9,
    Fact.Source.AGENT_TOOL: 0.8,
    Fact.Source.EXTRACTION: 0.6,
}

FACT_KEY_REQUIRED = "A fact needs a non-empty key."
FACT_KEY_TOO_LONG = "A fact key is at most 255 characters."
FACT_SCOPE_UNKNOWN = "Unknown scope: use session, user, agent or global."
FACT_TYPE_UNKNOWN = "Unknown fact_type."
FACT_SOURCE_UNKNOWN = "Unknown source."
SOURCE_MESSAGE_NOT_FOUND = "Message not found."
SOURCE_EPISODE_NOT_FOUND = "Episode not found."
SOURCE_THREAD_NOT_FOUND = "Thread not found."
FACT_CONFIDENCE_RANGE = "Confidence must be between 0 and 1."
FACT_VALUE_TOO_LARGE = "The value is larger than the limit of {limit} bytes."
FACT_VALUE_NOT_JSON = "The value must be JSON."
FACT_VALUE_REQUIRED = "A fact needs a value."
FACT_SESSION_NEEDS_THREAD = "A session fact needs a thread."
FACT_USER_NEEDS_MEMORY_USER = "A user fact needs a memory user."
FACT_AGENT_NEEDS_AGENT = "An agent fact needs an agent."
FACT_NOT_CURRENT = "Only the current version of a fact can be edited; this one was superseded."
FACT_REFERENCE_WORKSPACE = "The referenced object belongs to another workspace."

OUTCOME_CREATED = "created"
OUTCOME_CONFIRMED = "confirmed"
OUTCOME_SUPERSEDED = "superseded"
OUTCOME_SKIPPED = "skipped"
# Stored for an operator's review, not recalled until approved (docs/review.md).
OUTCOME_HELD = "held"
# Held for review, but an operator already rejected this value for this key: not stored again.
OUTCOME_REVIEW_REJECTED = "rejected"


@dataclass(frozen=True)
class RememberResult:
    fact: Fact
    outcome: str  # created | confirmed | superseded | skipped | held | rejected
    previous: Fact | None = None
    # A new key reconciled with a fact of another key (facts.services.consolidation): the
    # decision record {decision, reason, by, old, new}; None for same-key remembering.
    consolidation: dict | None = None


def _invalid(field: str, message: str) -> ApplicationError:
    return ApplicationError(message, fields={field: [message]})


def _value_encode(value) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise _invalid("value", FACT_VALUE_NOT_JSON)


def _value_validate(value) -> str:
    if value is None:
        raise _invalid("value", FACT_VALUE_REQUIRED)
    encoded = _value_encode(value)
    limit = settings.FACTS_VALUE_MAX_BYTES
    if len(encoded.encode()) > limit:
        raise _invalid("value", FACT_VALUE_TOO_LARGE.format(limit=limit))
    return encoded


def _key_validate(key) -> str:
    key = (key or "").strip() if isinstance(key, str) else ""
    if not key:
        raise _invalid("key", FACT_KEY_REQUIRED)
    if len(key) > 255:
        raise _invalid("key", FACT_KEY_TOO_LONG)
    return key


def _confidence_validate(confidence) -> float | None:
    if confidence is None:
        return None
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        raise _invalid("confidence", FACT_CONFIDENCE_RANGE)
    return float(confidence)


def fact_search_text(key: str, value) -> str:
    text = value if isinstance(value, str) else _value_encode(value)
    return f"{key_normalize(key)} {text}"


def fact_scope_reference(*, workspace, scope, agent=None, memory_user=None, thread=None) -> dict:
    """The (agent, memory_user, thread) columns a fact of `scope` stores, validated.

    A session fact copies its thread's agent and memory user, so agent-bound keys and the
    erasure of a memory user find it. A merged memory user resolves to the one it was
    merged into.
    """
    if scope not in Fact.Scope.values:
        raise _invalid("scope", FACT_SCOPE_UNKNOWN)
    for name, obj in (("agent", agent), ("memory_user", memory_user), ("thread", thread)):
        if obj is not None and obj.workspace_id != workspace.pk:
            raise NotFoundError(FACT_REFERENCE_WORKSPACE, fields={name: [FACT_REFERENCE_WORKSPACE]})
    if memory_user is not None:
        memory_user = memory_user_resolve_merged(memory_user=memory_user)
    if scope == Fact.Scope.SESSION:
        if thread is None:
            raise _invalid("thread", FACT_SESSION_NEEDS_THREAD)
        return {"agent_id": thread.agent_id, "memory_user_id": thread.memory_user_id, "thread_id": thread.pk}
    if scope == Fact.Scope.USER:
        if memory_user is None:
            raise _invalid("memory_user", FACT_USER_NEEDS_MEMORY_USER)
        return {"agent_id": None, "memory_user_id": memory_user.pk, "thread_id": None}
    if scope == Fact.Scope.AGENT:
        if agent is None:
            raise _invalid("agent", FACT_AGENT_NEEDS_AGENT)
        return {"agent_id": agent.pk, "memory_user_id": None, "thread_id": None}
    return {"agent_id": None, "memory_user_id": None, "thread_id": None}


def _fact_audit_payload(fact: Fact, **extra) -> dict:
    return {
        "key": fact.key,
        "scope": fact.scope,
        "value": fact.value,
        "fact_type": fact.fact_type,
        "confidence": fact.confidence,
        **extra,
    }


def _fact_new(
    *,
    workspace,
    key,
    value,
    scope,
    fact_type,
    confidence,
    source,
    source_message,
    source_episode,
    evidence,
    actor,
    now,
    reference: dict,
    **extra,
) -> Fact:
    """A new version of `key` (unsaved), valid from `now`."""
    return Fact(
        workspace=workspace,
        key=key,
        key_normalized=key_normalize(key),
        value=value,
        search_text=fact_search_text(key, value),
        scope=scope,
        fact_type=fact_type,
        confidence=confidence if confidence is not None else DEFAULT_CONFIDENCE[source],
        source=source,
        source_message=source_message,
        source_episode=source_episode,
        evidence=evidence,
        valid_from=now,
        last_confirmed_at=now,
        created_by=actor,
        **reference,
        **extra,
    )


def fact_remember(
    *,
    workspace,
    key: str,
    value,
    scope: str,
    fact_type: str = Fact.FactType.WORLD_KNOWLEDGE,
    agent=None,
    memory_user=None,
    thread=None,
    confidence: float | None = None,
    source: str = Fact.Source.API,
    source_message=None,
    source_episode=None,
    evidence: str = "",
    overwrite: bool = True,
    actor: str = "system",
    principal: Principal | None = None,
) -> RememberResult:
    """Remember `value` under `key` in `scope`; never overwrites in place.

    - no current version: creates one (outcome "created");
    - same value (JSON-equal): times_confirmed + 1, confidence raised (module docstring),
      half-life clock restarted (outcome "confirmed");
    - other value, overwrite: the current version is closed (valid_to, superseded_by,
      times_contradicted + 1) and a new one opened (outcome "superseded");
    - other value, no overwrite: nothing is written (outcome "skipped").

    Safe under concurrency: the current row is locked, and two racing creations of the same
    key resolve through the unique constraint into a confirmation.

    When the review setting of the agent writing it (`agent`, or the thread's) holds this
    source (`extraction` under `extracted`; every source but `operator` under `all`), a value
    that would be created or supersede is stored held instead (outcome "held"): closed, so no
    read of current facts sees it, until facts.services.review approves it. The same value
    held again is that held fact; a value rejected in review is not stored again ("rejected").

    A global fact is every agent's (facts.services.access): written for an agent-bound key
    (`principal`) or by extraction for `agent`, a value that would supersede its open version,
    directly or through cross-key consolidation, is held the same way, for that agent;
    confirming it and creating a key with no open version still apply.

    An `agent` not stored yet (threads.selectors.memory_context_for_write) is inserted in
    the transaction that writes the fact, so a refused call registers no agent.
    """
    key = _key_validate(key)
    encoded = _value_validate(value)
    if fact_type not in Fact.FactType.values:
        raise _invalid("fact_type", FACT_TYPE_UNKNOWN)
    if source not in Fact.Source.values:
        raise _invalid("source", FACT_SOURCE_UNKNOWN)
    confidence = _confidence_validate(confidence)
    reference = fact_scope_reference(
        workspace=workspace, scope=scope, agent=agent, memory_user=memory_user, thread=thread
    )
    review_agent = agent if agent is not None else getattr(thread, "agent", None)
    held = source != Fact.Source.OPERATOR and review_holds(
        review_agent, extracted=source == Fact.Source.EXTRACTION
    )
    global_guard = None
    if scope == Fact.Scope.GLOBAL:
        global_guard = fact_global_writer_agent(principal=principal, source=source, agent=review_agent)
    cross_key = fact_cross_key_decide(
        workspace=workspace,
        key=key,
        value=value,
        scope=scope,
        reference=reference,
        encode=_value_encode,
        overwrite=overwrite,
    )
    for attempt in range(2):
        try:
            with transaction.atomic():
                # An agent named for the first time is stored with its fact, or not at all.
                # Registered by another request meanwhile, with its own settings (review) and
                # maybe facts: decided again for that row, outside this transaction.
                stored = agent_pending_store(agent, refuse_other=True)
                if stored is not agent:
                    # The row just inserted: written facts name it, not the unsaved object.
                    review_agent = stored if review_agent is agent else review_agent
                    global_guard = stored if global_guard is agent else global_guard
                reference_now = _reference_held(reference)
                sources_gone = _sources_held(
                    thread_id=reference_now["thread_id"],
                    message_id=source_message and source_message.pk,
                    message_thread_id=source_message and source_message.thread_id,
                    episode_id=source_episode and source_episode.pk,
                )
                result = _fact_remember_locked(
                    workspace=workspace,
                    key=key,
                    value=value,
                    encoded=encoded,
                    scope=scope,
                    reference=reference_now,
                    sources_gone=sources_gone,
                    fact_type=fact_type,
                    confidence=confidence,
                    source=source,
                    source_message=source_message,
                    source_episode=source_episode,
                    evidence=evidence or "",
                    overwrite=overwrite,
                    actor=actor,
                    cross_key=cross_key,
                    review_agent=review_agent if held else None,
                    global_guard=global_guard,
                )
            return result
        except AgentRegisteredMeanwhile as registered:
            return fact_remember(
                workspace=workspace,
                key=key,
                value=value,
                scope=scope,
                fact_type=fact_type,
                agent=registered.agent,
                memory_user=memory_user,
                thread=thread,
                confidence=confidence,
                source=source,
                source_message=source_message,
                source_episode=source_episode,
                evidence=evidence,
                overwrite=overwrite,
                actor=actor,
                principal=principal,
            )
        except IntegrityError:
            # A concurrent remember created the key first; the second attempt confirms it.
            if attempt:
                raise
    raise AssertionError("unreachable")


def _reference_held(reference: dict) -> dict:
    """`reference` as it stands inside the writing transaction, its person held until the fact
    commits (identities.services.memory_users_hold): the person was resolved before the
    cross-key decision, an embedding or model call, and a merge committing meanwhile would
    have left the new fact on the merged person, where the survivor's lookups never see it."""
    person = reference["memory_user_id"]
    if person is None:
        return reference
    now = memory_users_hold(ids=[person])[person]
    if reference["thread_id"] is not None:
        # A session fact's person is its thread's, which a merge re-points.
        now = (
            Thread.objects.filter(pk=reference["thread_id"]).values_list("memory_user_id", flat=True).first()
        )
        now = memory_users_hold(ids=[now])[now] if now is not None else person
    return reference if now == person else {**reference, "memory_user_id": now}


def _sources_held(*, thread_id, message_id, message_thread_id, episode_id) -> dict:
    """Hold what a fact points at FOR KEY SHARE until it commits, and return the fields
    ({field: [message]}) of those deleted since the caller read them.

    Each was read before this transaction. A fact stored pointing at one deleted meanwhile
    failed its foreign key at commit; a version of the key citing the same thread or episode,
    locked first, deadlocked with the delete, which clears the citing facts before it deletes
    what they cite. So these come before any fact: the threads (the session's, the source
    message's) in key order, then the message, then the episode. Every deleter of a thread or
    a message locks the thread FOR UPDATE first, and every deleter of an episode the episode
    (episodes.services.records, an erasure's locked_first holdings, retention's batches): it
    waits for this transaction, or this one waits for the delete and then finds the row gone.
    After the person (_reference_held), which an erasure locks before all of them. Review
    decisions hold the held fact's person and then its sources the same way
    (facts.services.review, facts_people_hold)."""
    gone = {}
    threads = {pk for pk in (thread_id, message_thread_id) if pk is not None}
    with connection.cursor() as cursor:
        present = set()
        if threads:
            cursor.execute(
                f"SELECT id FROM {Thread._meta.db_table} WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE",
                [sorted(threads)],
            )
            present = {row[0] for row in cursor.fetchall()}
        if thread_id is not None and thread_id not in present:
            gone["thread"] = [SOURCE_THREAD_NOT_FOUND]
        for field, pk, missing in (
            ("source_message", message_id, SOURCE_MESSAGE_NOT_FOUND),
            ("source_episode", episode_id, SOURCE_EPISODE_NOT_FOUND),
        ):
            if pk is None:
                continue
            table = Fact._meta.get_field(field).related_model._meta.db_table
            cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR KEY SHARE", [pk])
            if cursor.fetchone() is None:
                gone[field] = [missing]
    return gone


def _sources_refuse(sources_gone: dict | None) -> None:
    """A 404 naming the sources deleted meanwhile (_sources_held), before a fact that points
    at them is stored. A confirmation, a skip or a value held or rejected before stores
    nothing new, and is not refused."""
    if sources_gone:
        raise NotFoundError(next(iter(sources_gone.values()))[0], fields=sources_gone)


def _fact_remember_locked(
    *,
    workspace,
    key,
    value,
    encoded,
    scope,
    reference,
    fact_type,
    confidence,
    source,
    source_message,
    source_episode,
    evidence,
    overwrite,
    actor,
    cross_key=None,
    review_agent=None,
    global_guard=None,
    sources_gone=None,
) -> RememberResult:
    now = timezone.now()
    current = (
        Fact.objects.select_for_update()
        .filter(workspace=workspace, key=key, scope=scope, valid_to__isnull=True, **reference)
        .first()
    )
    # A new key near a current fact of another key: reconciled with it (cross-key consolidation).
    cross_old = _fact_cross_key_old(cross_key) if cross_key is not None and current is None else None
    if cross_key is not None and current is None and cross_old is None:
        cross_key = _cross_key_stale(cross_key)
    if cross_old is not None and cross_key.decision == DECISION_NOOP:
        record = _fact_noop_confirm(
            old=cross_old, decision=cross_key, now=now, confirm_rate=CONFIRM_RATE, actor=actor
        )
        return RememberResult(fact=cross_old, outcome=OUTCOME_CONFIRMED, consolidation=record)
    if current is not None and _value_encode(current.value) == encoded:
        current.times_confirmed += 1
        raised = current.confidence + (1 - current.confidence) * CONFIRM_RATE
        current.confidence = round(min(1.0, max(raised, confidence or 0.0)), 6)
        current.last_confirmed_at = now
        if evidence:
            current.evidence = evidence
        current.save(
            update_fields=["times_confirmed", "confidence", "last_confirmed_at", "evidence", "updated_at"]
        )
        audit_record(
            workspace=workspace,
            actor=actor,
            action=AuditEvent.Action.UPDATE,
            entity_type="fact",
            entity_id=current.pk,
            changes={"key": key, "outcome": OUTCOME_CONFIRMED, "confidence": current.confidence},
        )
        return RememberResult(fact=current, outcome=OUTCOME_CONFIRMED)
    if current is not None and not overwrite:
        return RememberResult(fact=current, outcome=OUTCOME_SKIPPED)
    if global_guard is not None and review_agent is None:
        # An open global version is every agent's: one agent's other value waits for review.
        replaces = cross_old is not None and cross_key.decision in REPLACING
        if current is not None or replaces:
            review_agent = global_guard
    if review_agent is not None:
        return _fact_hold(
            workspace=workspace,
            key=key,
            value=value,
            encoded=encoded,
            scope=scope,
            reference=reference,
            fact_type=fact_type,
            confidence=confidence,
            source=source,
            source_message=source_message,
            source_episode=source_episode,
            evidence=evidence,
            actor=actor,
            cross_key=cross_key,
            review_agent=review_agent,
            now=now,
            sources_gone=sources_gone,
        )

    _sources_refuse(sources_gone)
    fact = _fact_new(
        workspace=workspace,
        key=key,
        value=value,
        scope=scope,
        fact_type=fact_type,
        confidence=confidence,
        source=source,
        source_message=source_message,
        source_episode=source_episode,
        evidence=evidence,
        actor=actor,
        now=now,
        reference=reference,
    )
    if current is not None:
        current.valid_to = now
        current.times_contradicted += 1
        current.save(update_fields=["valid_to", "times_contradicted", "updated_at"])
    fact.save()
    if current is None:
        FactKey.objects.bulk_create(
            [FactKey(workspace=workspace, key_normalized=fact.key_normalized)], ignore_conflicts=True
        )
    if current is not None:
        Fact.objects.filter(pk=current.pk).update(superseded_by=fact)
        current.superseded_by = fact
    record = None
    if current is None and cross_key is not None:
        if cross_old is not None and cross_key.decision in REPLACING:
            record = _fact_close(old=cross_old, new=fact, decision=cross_key, now=now, actor=actor)
            current = cross_old
        else:
            record = {**cross_key.record(new=fact.pk)}
            record.pop("similarity", None)
    outcome = OUTCOME_SUPERSEDED if current is not None else OUTCOME_CREATED
    from facts.tasks import fact_embed_task

    fact_embed_task.delay_on_commit([str(fact.pk)])
    audit_record(
        workspace=workspace,
        actor=actor,
        action=AuditEvent.Action.CREATE,
        entity_type="fact",
        entity_id=fact.pk,
        changes=_fact_audit_payload(
            fact,
            outcome=outcome,
            source=source,
            **({"previous_id": str(current.pk), "previous_value": current.value} if current else {}),
            **({"consolidation": record} if record else {}),
        ),
    )
    if scope == Fact.Scope.USER and (
        fact_type == Fact.FactType.USER_PREFERENCE
        or (current is not None and current.fact_type == Fact.FactType.USER_PREFERENCE)
    ):
        memory_user_preferences_sync(memory_user_ids=[reference["memory_user_id"]])
    return RememberResult(fact=fact, outcome=outcome, previous=current, consolidation=record)


def _fact_hold(
    *,
    workspace,
    key,
    value,
    encoded,
    scope,
    reference,
    fact_type,
    confidence,
    source,
    source_message,
    source_episode,
    evidence,
    actor,
    cross_key,
    review_agent,
    now,
    sources_gone=None,
) -> RememberResult:
    """Store `value` held for review (fact_remember's docstring); the current version, if any,
    stays current and no other key is closed until an operator approves it."""
    reviewed = Fact.objects.filter(
        workspace=workspace,
        key=key,
        scope=scope,
        review__in=[Fact.Review.HELD, Fact.Review.REJECTED],
        **reference,
    ).order_by("-created_at")[:50]
    for earlier in reviewed:
        if _value_encode(earlier.value) == encoded:
            outcome = OUTCOME_HELD if earlier.review == Fact.Review.HELD else OUTCOME_REVIEW_REJECTED
            return RememberResult(fact=earlier, outcome=outcome)
    _sources_refuse(sources_gone)
    fact = _fact_new(
        workspace=workspace,
        key=key,
        value=value,
        scope=scope,
        fact_type=fact_type,
        confidence=confidence,
        source=source,
        source_message=source_message,
        source_episode=source_episode,
        evidence=evidence,
        actor=actor,
        now=now,
        reference=reference,
        # An empty validity: closed from the start, so no read of current facts sees it.
        valid_to=now,
        review=Fact.Review.HELD,
        review_agent=review_agent,
    )
    fact.save(force_insert=True)
    record = None
    if cross_key is not None:
        # Kept for the reviewer to read; approval opens this key and closes no other.
        record = {**cross_key.record(new=fact.pk)}
        record.pop("similarity", None)
    audit_record(
        workspace=workspace,
        actor=actor,
        action=AuditEvent.Action.CREATE,
        entity_type="fact",
        entity_id=fact.pk,
        changes=_fact_audit_payload(
            fact,
            outcome=OUTCOME_HELD,
            source=source,
            review="waiting",
            **({"consolidation": record} if record else {}),
        ),
    )
    return RememberResult(fact=fact, outcome=OUTCOME_HELD, consolidation=record)


def fact_update(
    *,
    fact: Fact,
    actor: str,
    value=None,
    fact_type: str | None = None,
    confidence: float | None = None,
    evidence: str | None = None,
    principal: Principal | None = None,
) -> Fact:
    """Edit the current version. A new value supersedes it (returns the new version); the
    other fields are metadata and change in place. Each change is audited. An agent-bound key
    (`principal`) may not edit a global fact: 403, checked first."""
    fact_change_authorize(fact=fact, principal=principal)
    if fact.valid_to is not None:
        raise ApplicationError(FACT_NOT_CURRENT, code="conflict", status_code=409)
    if fact_type is not None and fact_type not in Fact.FactType.values:
        raise _invalid("fact_type", FACT_TYPE_UNKNOWN)
    confidence = _confidence_validate(confidence)
    with transaction.atomic():
        if value is not None and _value_validate(value) != _value_encode(fact.value):
            result = fact_remember(
                workspace=fact.workspace,
                key=fact.key,
                value=value,
                scope=fact.scope,
                fact_type=fact_type or fact.fact_type,
                agent=fact.agent,
                memory_user=fact.memory_user,
                thread=fact.thread,
                confidence=confidence,
                source=Fact.Source.OPERATOR if actor.startswith("operator:") else fact.source,
                evidence=evidence if evidence is not None else "",
                actor=actor,
                principal=principal,
            )
            return result.fact
        changes = {}
        fact = Fact.objects.select_for_update().get(pk=fact.pk)
        for name, new in (("fact_type", fact_type), ("confidence", confidence), ("evidence", evidence)):
            if new is not None and getattr(fact, name) != new:
                changes[name] = {"from": getattr(fact, name), "to": new}
                setattr(fact, name, new)
        if not changes:
            return fact
        fact.save(update_fields=[*changes, "updated_at"])
        audit_record(
            workspace=fact.workspace,
            actor=actor,
            action=AuditEvent.Action.UPDATE,
            entity_type="fact",
            entity_id=fact.pk,
            changes={"key": fact.key, **changes},
        )
        if fact.scope == Fact.Scope.USER and "fact_type" in changes:
            memory_user_preferences_sync(memory_user_ids=[fact.memory_user_id])
    return fact
