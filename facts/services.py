"""Writes of facts. A value is never overwritten in place: it is superseded by a new version.

Confidence on confirmation (the same value remembered again):
    c' = max(c + (1 - c) * CONFIRM_RATE, c_given)      with CONFIRM_RATE = 0.2
so 0.6 -> 0.68 -> 0.744 -> ...; it approaches 1 and never exceeds it.
"""

import json
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.access import Principal
from core.errors import ApplicationError, NotFoundError
from core.models import AuditEvent
from core.services import audit_record
from facts.models import Fact, FactEmbedding, FactKey, key_normalize
from identities.models import MemoryUser
from identities.selectors import memory_user_resolve_merged

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


@dataclass(frozen=True)
class RememberResult:
    fact: Fact
    outcome: str  # created | confirmed | superseded | skipped
    previous: Fact | None = None


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
    for attempt in range(2):
        try:
            with transaction.atomic():
                result = _fact_remember_locked(
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
                    evidence=evidence or "",
                    overwrite=overwrite,
                    actor=actor,
                )
            return result
        except IntegrityError:
            # A concurrent remember created the key first; the second attempt confirms it.
            if attempt:
                raise
    raise AssertionError("unreachable")


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
) -> RememberResult:
    now = timezone.now()
    current = (
        Fact.objects.select_for_update()
        .filter(workspace=workspace, key=key, scope=scope, valid_to__isnull=True, **reference)
        .first()
    )
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

    fact = Fact(
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
        ),
    )
    if scope == Fact.Scope.USER and (
        fact_type == Fact.FactType.USER_PREFERENCE
        or (current is not None and current.fact_type == Fact.FactType.USER_PREFERENCE)
    ):
        memory_user_preferences_sync(memory_user_ids=[reference["memory_user_id"]])
    return RememberResult(fact=fact, outcome=outcome, previous=current)


def fact_update(
    *,
    fact: Fact,
    actor: str,
    value=None,
    fact_type: str | None = None,
    confidence: float | None = None,
    evidence: str | None = None,
) -> Fact:
    """Edit the current version. A new value supersedes it (returns the new version); the
    other fields are metadata and change in place. Each change is audited."""
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


_DELETE_SQL = """
WITH unlinked AS (
    -- Histories point at their successors (SET NULL in Django, not in the database; the
    -- deferred foreign key is checked at commit, after this).
    UPDATE facts_fact SET superseded_by_id = NULL
    WHERE superseded_by_id = ANY(%(ids)s::uuid[]) AND NOT (id = ANY(%(ids)s::uuid[]))
), unembedded AS (
    -- The database cascades too (facts 0007), which also catches a vector committed while
    -- this statement waited for the fact's row lock; this delete covers the rest in one pass.
    DELETE FROM facts_factembedding e USING facts_fact f
    WHERE e.fact_id = f.id AND f.workspace_id = %(workspace)s AND f.id = ANY(%(ids)s::uuid[])
), deleted AS (
    DELETE FROM facts_fact
    WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s::uuid[]) {agent_condition}
    RETURNING id, key, scope, memory_user_id, fact_type
), audited AS (
    INSERT INTO core_auditevent (workspace_id, at, actor, action, entity_type, entity_id, changes)
    SELECT %(workspace)s, now(), %(actor)s, 'delete', 'fact', id::text,
           jsonb_build_object('key', key, 'scope', scope)
    FROM deleted
)
SELECT count(*),
       coalesce(array_agg(DISTINCT memory_user_id) FILTER (
           WHERE fact_type = 'user_preference' AND memory_user_id IS NOT NULL), '{{}}')
FROM deleted
"""


def _facts_delete(*, workspace, ids: list, actor: str, agent=None) -> dict:
    """Delete the facts in `ids` (of `workspace`, and of `agent` or agent-less when given)
    and audit each one; all or nothing: when a row is missing, raise and roll back.

    One statement deletes, audits and reports: through the ORM, 10,000 rows cost ~3 s of
    per-row Python (collector, audit objects, 10,000 bound parameters per query); as an
    array parameter and a data-modifying CTE they take ~0.3 s. Must run in a transaction.
    """
    from django.db import connection

    ids = [str(pk) for pk in ids]
    agent_condition = "AND (agent_id IS NULL OR agent_id = %(agent)s)" if agent is not None else ""
    with connection.cursor() as cursor:
        cursor.execute(
            _DELETE_SQL.format(agent_condition=agent_condition),
            {"workspace": workspace.pk, "ids": ids, "actor": actor, "agent": agent.pk if agent else None},
        )
        deleted, preference_users = cursor.fetchone()
    if deleted != len(ids):
        raise NotFoundError("Some of these facts do not exist.", fields={"ids": ["Unknown id."]})
    if preference_users:
        memory_user_preferences_sync(memory_user_ids=preference_users)
    return {"facts": deleted}


def fact_delete(*, fact: Fact, actor: str) -> dict:
    """Delete one version. Deleting the current version forgets the key in that scope; its
    history stays listable until deleted too."""
    with transaction.atomic():
        return _facts_delete(workspace=fact.workspace, ids=[fact.pk], actor=actor)


def fact_batch_delete(*, principal: Principal, ids, actor: str | None = None) -> dict:
    """Delete every fact in `ids`, or nothing: an id the principal cannot see is a 404.

    The visibility rule is facts.selectors.fact_scope_for_principal's: the workspace, and for
    an agent-bound key, agent-less facts or the key's agent's.
    """
    ids = list(dict.fromkeys(ids))
    with transaction.atomic():
        return _facts_delete(
            workspace=principal.workspace, ids=ids, actor=actor or principal.actor, agent=principal.agent
        )


def fact_touch(*, fact_ids) -> None:
    """Count a read (access_count, last_accessed_at) without loading the rows."""
    if fact_ids:
        Fact.objects.filter(pk__in=list(fact_ids)).update(
            access_count=F("access_count") + 1, last_accessed_at=timezone.now()
        )


def memory_user_preferences_sync(*, memory_user_ids) -> None:
    """Rebuild each memory user's cached `preferences` from their current user-scope
    `user_preference` facts (the facts are the truth; the cache is derived)."""
    for memory_user_id in memory_user_ids:
        if memory_user_id is None:
            continue
        preferences = dict(
            Fact.objects.filter(
                memory_user_id=memory_user_id,
                scope=Fact.Scope.USER,
                fact_type=Fact.FactType.USER_PREFERENCE,
                valid_to__isnull=True,
            )
            .order_by("valid_from")
            .values_list("key", "value")
        )
        MemoryUser.objects.filter(pk=memory_user_id).update(preferences=preferences)


def memory_user_facts_merge(*, source, target, now) -> dict:
    """The facts part of a memory-user merge (core.holdings), in the caller's transaction.

    Two current user-scope facts with the same key: the newer (valid_from) stays current,
    the older is closed and superseded by it, so it stays in the key's history. Closing
    happens before the move, or the partial unique index on current versions would reject
    it. The preferences caches of both users are rebuilt afterwards.
    """
    source_current = {
        f.key: f
        for f in Fact.objects.select_for_update().filter(
            memory_user=source, scope=Fact.Scope.USER, valid_to__isnull=True
        )
    }
    conflicts = 0
    if source_current:
        for kept in Fact.objects.select_for_update().filter(
            memory_user=target, scope=Fact.Scope.USER, valid_to__isnull=True, key__in=list(source_current)
        ):
            other = source_current[kept.key]
            newer, older = (other, kept) if other.valid_from > kept.valid_from else (kept, other)
            Fact.objects.filter(pk=older.pk).update(
                valid_to=now, superseded_by=newer, times_contradicted=older.times_contradicted + 1
            )
            conflicts += 1
    moved = Fact.objects.filter(memory_user=source).update(memory_user=target, updated_at=now)
    memory_user_preferences_sync(memory_user_ids=[target.pk, source.pk])
    return {"facts": moved, "fact_conflicts": conflicts}


def fact_embedding_text(fact: Fact) -> str:
    value = fact.value if isinstance(fact.value, str) else _value_encode(fact.value)
    return f"{fact.key_normalized}: {value}"


def fact_embed_sweep(*, limit: int, before) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of current facts created before `before` with no
    vector at all (core.lib.sweep.sweep_take's order): what a lost or failed task left behind."""
    from django.db.models import Exists, OuterRef

    from core.lib.sweep import sweep_take

    has_vector = FactEmbedding.objects.filter(fact=OuterRef("pk"))
    missing = Fact.objects.filter(valid_to__isnull=True, created_at__lt=before).filter(~Exists(has_vector))
    return sweep_take(missing, limit=limit)


def fact_embed_batch(*, fact_ids, provider=None) -> int:
    """Store vectors for the current facts of `fact_ids` that lack one under their
    workspace's embedding model. Idempotent (existing vectors are skipped; a racing run's
    rows win through the unique constraint); a fact deleted meanwhile is skipped. Returns
    the rows written."""
    from core.embeddings import embedding_provider_for

    facts = list(
        Fact.objects.filter(pk__in=list(fact_ids), valid_to__isnull=True).select_related("workspace")
    )
    by_workspace: dict = {}
    for fact in facts:
        by_workspace.setdefault(fact.workspace_id, []).append(fact)
    written = 0
    for group in by_workspace.values():
        group_provider = provider or embedding_provider_for(group[0].workspace)
        model = group_provider.model_name
        done = set(
            FactEmbedding.objects.filter(fact__in=group, model=model).values_list("fact_id", flat=True)
        )
        todo = [fact for fact in group if fact.pk not in done]
        if not todo:
            continue
        vectors = group_provider.embed([fact_embedding_text(fact) for fact in todo])
        with transaction.atomic():
            # Facts deleted while the vectors were computed are skipped: a vector of one would
            # fail the whole batch at commit (deferred foreign key). The lock keeps the others
            # until their vectors commit; pk order, so two batches never deadlock.
            alive = set(
                Fact.objects.filter(pk__in=[fact.pk for fact in todo])
                .order_by("pk")
                .select_for_update(no_key=True)
                .values_list("pk", flat=True)
            )
            rows = FactEmbedding.objects.bulk_create(
                [
                    FactEmbedding(
                        fact=fact,
                        workspace_id=fact.workspace_id,
                        model=model,
                        dimensions=len(vector),
                        embedding=vector,
                    )
                    for fact, vector in zip(todo, vectors, strict=True)
                    if fact.pk in alive
                ],
                ignore_conflicts=True,
            )
        written += len(rows)
    return written
