"""Writes of procedures: create (taught, learned or evolved), edit, record runs, delete, embed.

Trigger conditions (every key optional; all present keys must hold for a procedure to fire):

    {
      "goal_contains":     ["deploy", "release"],  # any phrase occurs in the goal (case-insensitive)
      "goal_contains_all": ["staging"],            # every phrase occurs in the goal
      "goal_excludes":     ["rollback"],           # no phrase occurs in the goal
      "agents":            ["assistant"],          # the calling agent's slug is one of these
      "channels":          ["telegram", "slack"],  # context.channel is one of these
      "context":           {"env": "prod"}         # context[key] == value for each key
    }

A string is accepted wherever a list of phrases is expected. `{}` fires for every goal.

Who may change a procedure (`procedure_change_authorize`): a workspace-wide procedure (no
agent) tells every agent of the workspace what to do, so evolving, activating, deactivating,
editing or deleting one needs a workspace-wide key (or an operator); an agent-bound key reads,
matches and records runs of it, and changes only its own agent's procedures.

One version of a lineage (workspace, agent, name) is active: the partial unique index
`procedures_active_version` holds it, and every write that activates a version locks the
lineage first (`procedure_lineage_lock`, also taken by review decisions and imports), so two
at the same instant end as if one ran after the other, even when the lineage has no row yet.
A learned signature (agent, learned_signature: `procedures_learned_signature`) is held the same
way by the learning pass and imports.
"""

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from core.access import Principal, references_resolve, require_workspace_key
from core.errors import ApplicationError, ConflictError, NotFoundError
from core.models import AuditEvent
from core.services import audit_record, audit_record_deletes
from procedures.models import ACTIVE_VERSION_CONSTRAINT, Procedure, ProcedureEmbedding

PROCEDURE_CONTENT_MAX_BYTES = 256 * 1024

PROCEDURE_NAME_REQUIRED = "A procedure needs a name (1-200 characters)."
PROCEDURE_TYPE_UNKNOWN = "Unknown procedure_type."
PROCEDURE_CONTENT_REQUIRED = "A procedure needs content."
PROCEDURE_CONTENT_TOO_LARGE = f"Content is larger than the limit of {PROCEDURE_CONTENT_MAX_BYTES} bytes."
PROCEDURE_ORIGIN_UNKNOWN = "Unknown origin."
PROCEDURE_NAME_TAKEN = "A procedure with this name and version already exists for this agent."
PROCEDURE_SIGNATURE_TAKEN = "A procedure learned from this trigger signature already exists for this agent."
PROCEDURE_ACTIVE_TAKEN = (
    "Another version of this procedure is active for this agent; evolve it or activate this one instead."
)
PROCEDURE_LEARNED_NEEDS_EPISODES = "A self-learned procedure names the episodes it was learned from."
PROCEDURE_EPISODES_UNKNOWN = "Some of these episodes do not exist."
PROCEDURE_PARENT_WORKSPACE = "The parent procedure belongs to another workspace."
PROCEDURE_DURATION_NEGATIVE = "duration_ms cannot be negative."
PROCEDURES_NOT_FOUND = "Some of these procedures do not exist."
TRIGGER_NOT_OBJECT = "trigger_conditions must be a JSON object."
TRIGGER_UNKNOWN_KEY = "Unknown condition '{key}'."
TRIGGER_PHRASES = "'{key}' is a list of non-empty strings."
TRIGGER_CONTEXT = "'context' is an object of expected values."

# The advisory locks of a workspace's lineages and learned signatures (procedure_lineage_lock):
# an import holds one per lineage it brings, and PostgreSQL's shared lock table has
# max_locks_per_transaction x max_connections slots (6,400 by default), which one lock per
# lineage would exhaust on an import of a few thousand names. Two lineages (or signatures) of a
# workspace share a lock 1 time in 256: they then wait for each other, nothing else changes.
LINEAGE_LOCK_BUCKETS = 256
SIGNATURE_CONSTRAINT = "procedures_learned_signature"

PHRASE_KEYS = ("goal_contains", "goal_contains_all", "goal_excludes", "agents", "channels")
TRIGGER_KEYS = (*PHRASE_KEYS, "context")


def _invalid(field: str, message: str) -> ApplicationError:
    return ApplicationError(message, fields={field: [message]})


def _conflict(exc: IntegrityError) -> ConflictError:
    """The 409 of a unique constraint: a second active version, else a name and version taken."""
    constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    if constraint == ACTIVE_VERSION_CONSTRAINT:
        return ConflictError(PROCEDURE_ACTIVE_TAKEN, fields={"name": [PROCEDURE_ACTIVE_TAKEN]})
    if constraint == SIGNATURE_CONSTRAINT:
        return _signature_taken()
    return ConflictError(PROCEDURE_NAME_TAKEN, fields={"name": [PROCEDURE_NAME_TAKEN]})


def procedure_change_authorize(*, principal: Principal | None, procedure: Procedure) -> None:
    """Refuse an agent-bound key any change to a workspace-wide procedure (403
    `workspace_key_required`): it would change what every agent of the workspace is told.
    Reads, matches and recorded runs stay open to it; another agent's procedure never reaches
    here (its selector answers 404). None is a caller with no key: the system, the admin."""
    if principal is not None and procedure.agent_id is None:
        require_workspace_key(principal)


def _signature_taken() -> ConflictError:
    return ConflictError(PROCEDURE_SIGNATURE_TAKEN, fields={"learned_signature": [PROCEDURE_SIGNATURE_TAKEN]})


def procedure_lineage_lock(
    *, workspace_id, lineages: Iterable[tuple], signatures: Iterable[tuple] = (), also=None
) -> None:
    """Hold the lineages `lineages` ((agent id or None, name) pairs of the workspace), the learned
    signatures `signatures` ((agent id or None, signature) pairs) and the procedure `also` until
    the transaction ends. Every write that puts an active version into a lineage or a signature
    into the workspace takes it first: creates, evolutions, activations, renames of an active
    version, review decisions, learning passes and imports.

    A lineage is held twice over, always in this order, so two lockers never deadlock each
    other: first a transaction-scoped advisory lock of the lineage (LINEAGE_LOCK_BUCKETS, in
    key order, in one statement), which exists before the lineage has a row, so the first
    create of a name and an import or a rename into it run one after the other too; then every
    stored version, the procedures of `signatures` and `also`, in key order. A write takes all
    its keys in one call; only an import, which learns its names batch by batch, takes a call
    per batch (portability.services.importing), and runs again whole when PostgreSQL aborts it
    as the victim of a deadlock between those calls.

    The writes of one lineage then run one after the other, and each reads (READ COMMITTED:
    every statement takes a new snapshot) the versions the one before it committed: two
    activations at the same instant leave the later one active, two evolutions of one parent
    get consecutive version numbers instead of a 409, and an import reports a version created
    meanwhile as it reports any stored one.
    """
    pairs = {(str(agent_id) if agent_id is not None else None, name) for agent_id, name in lineages}
    keys = {_lineage_key(workspace_id, agent_id, name) for agent_id, name in pairs}
    keys |= {_signature_key(workspace_id, agent_id, signature) for agent_id, signature in signatures}
    if keys:
        with connection.cursor() as cursor:
            # unnest returns the array in its order: the keys are taken sorted.
            cursor.execute("SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k", [sorted(keys)])
    _versions_lock(workspace_id=workspace_id, lineages=pairs, signatures=signatures, also=also)


def _versions_lock(*, workspace_id, lineages: Iterable[tuple], signatures: Iterable[tuple], also) -> None:
    """Lock (FOR NO KEY UPDATE, in key order) every stored version of `lineages`, the procedures
    of `signatures` ((agent id or None, learned signature) pairs) and the procedure `also`, once
    their advisory keys are held (procedure_lineage_lock)."""
    names = defaultdict(set)
    for agent_id, name in lineages:
        names[str(agent_id) if agent_id is not None else None].add(name)
    learned = defaultdict(set)
    for agent_id, signature in signatures:
        learned[str(agent_id) if agent_id is not None else None].add(signature)
    versions = Q()
    for agent_id, agent_names in names.items():
        versions |= Q(workspace_id=workspace_id, agent_id=agent_id, name__in=sorted(agent_names))
    for agent_id, agent_signatures in learned.items():
        versions |= Q(
            workspace_id=workspace_id, agent_id=agent_id, learned_signature__in=sorted(agent_signatures)
        )
    if also is not None:
        versions |= Q(pk=also)
    if not versions:
        return
    # NO KEY: runs and vectors that point at these rows (FOR KEY SHARE) are not held up.
    list(Procedure.objects.filter(versions).order_by("pk").select_for_update(no_key=True).values_list("pk"))


def _lineage_key(workspace_id, agent_id, name: str) -> int:
    """The advisory lock key of one lineage: one of LINEAGE_LOCK_BUCKETS keys of its workspace
    (the prefix keeps them apart from the other single-key advisory locks of the database)."""
    bucket = int.from_bytes(hashlib.blake2b(f"{agent_id or ''}:{name}".encode(), digest_size=8).digest())
    return _bucket_key(workspace_id, bucket % LINEAGE_LOCK_BUCKETS)


def _signature_key(workspace_id, agent_id, signature: str) -> int:
    """The advisory lock key of one learned signature, among the same LINEAGE_LOCK_BUCKETS keys
    of its workspace as the lineages."""
    text = f"signature:{agent_id or ''}:{signature}"
    bucket = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest())
    return _bucket_key(workspace_id, bucket % LINEAGE_LOCK_BUCKETS)


def _bucket_key(workspace_id, bucket: int) -> int:
    text = f"procedures:lineage:{workspace_id}:{bucket}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def trigger_conditions_validate(conditions) -> dict:
    """Check conditions against the schema in the module docstring; return them normalized
    (phrase lists as lists of stripped strings)."""
    if conditions is None:
        return {}
    if not isinstance(conditions, dict):
        raise _invalid("trigger_conditions", TRIGGER_NOT_OBJECT)
    cleaned = {}
    for key, value in conditions.items():
        if key not in TRIGGER_KEYS:
            raise _invalid("trigger_conditions", TRIGGER_UNKNOWN_KEY.format(key=key))
        if key == "context":
            if not isinstance(value, dict):
                raise _invalid("trigger_conditions", TRIGGER_CONTEXT)
            cleaned[key] = value
            continue
        phrases = [value] if isinstance(value, str) else value
        if not isinstance(phrases, list) or not all(isinstance(p, str) and p.strip() for p in phrases):
            raise _invalid("trigger_conditions", TRIGGER_PHRASES.format(key=key))
        cleaned[key] = [p.strip() for p in phrases]
    return cleaned


def _content_validate(content):
    if content is None or content == "":
        raise _invalid("content", PROCEDURE_CONTENT_REQUIRED)
    try:
        size = len(json.dumps(content, ensure_ascii=False).encode())
    except (TypeError, ValueError):
        raise _invalid("content", PROCEDURE_CONTENT_REQUIRED)
    if size > PROCEDURE_CONTENT_MAX_BYTES:
        raise _invalid("content", PROCEDURE_CONTENT_TOO_LARGE)
    return content


def procedure_search_text(*, name: str, description: str, trigger_conditions: dict, content) -> str:
    phrases = " ".join(
        p for key in ("goal_contains", "goal_contains_all") for p in trigger_conditions.get(key, [])
    )
    body = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    # The body is capped: the name, description and phrases carry the meaning for search.
    return f"{name} {description} {phrases} {body[:20000]}"


def procedure_create(
    *,
    workspace,
    name: str = "",
    procedure_type: str,
    content,
    agent=None,
    description: str = "",
    trigger_conditions: dict | None = None,
    origin: str | None = None,
    source_episode_ids=(),
    parent: Procedure | None = None,
    learned_signature: str = "",
    actor: str = "system",
    principal: Principal | None = None,
) -> Procedure:
    """Create a procedure.

    With a `parent` it is an evolution: it takes the parent's name (unless given), the next
    version number of that name, origin "evolved", and the parent is deactivated so only the
    newest version fires in match. A self-learned procedure must name existing episodes;
    `learned_signature` is set only by the learning pass (procedures.services.learning); one
    the agent already has is a 409 (PROCEDURE_SIGNATURE_TAKEN), decided under its lock.
    With a `principal`, an agent-bound key may neither evolve nor create a workspace-wide
    procedure (procedure_change_authorize).
    """
    from episodes.models import Episode

    if parent is not None and parent.workspace_id != workspace.pk:
        raise NotFoundError(PROCEDURE_PARENT_WORKSPACE, fields={"parent": [PROCEDURE_PARENT_WORKSPACE]})
    name = (name or (parent.name if parent else "")).strip()
    if not name or len(name) > 200:
        raise _invalid("name", PROCEDURE_NAME_REQUIRED)
    if procedure_type not in Procedure.ProcedureType.values:
        raise _invalid("procedure_type", PROCEDURE_TYPE_UNKNOWN)
    origin = origin or (Procedure.Origin.EVOLVED if parent else Procedure.Origin.HUMAN)
    if origin not in Procedure.Origin.values:
        raise _invalid("origin", PROCEDURE_ORIGIN_UNKNOWN)
    content = _content_validate(content)
    conditions = trigger_conditions_validate(trigger_conditions)
    episode_ids = list(dict.fromkeys(source_episode_ids or ()))
    if origin == Procedure.Origin.SELF_LEARNED and not episode_ids:
        raise _invalid("source_episode_ids", PROCEDURE_LEARNED_NEEDS_EPISODES)
    if episode_ids and Episode.objects.filter(workspace=workspace, pk__in=episode_ids).count() != len(
        episode_ids
    ):
        raise _invalid("source_episode_ids", PROCEDURE_EPISODES_UNKNOWN)
    if agent is None and parent is not None:
        agent = parent.agent
    if principal is not None:
        if parent is not None:
            procedure_change_authorize(principal=principal, procedure=parent)
        if agent is None:
            require_workspace_key(principal)
    try:
        with transaction.atomic():
            version = 1
            agent_id = agent.pk if agent is not None else None
            procedure_lineage_lock(
                workspace_id=workspace.pk,
                lineages=[(agent_id, name)],
                signatures=[(agent_id, learned_signature)] if learned_signature else (),
                also=parent.pk if parent is not None else None,
            )
            # Read under the lock: a signature stored meanwhile (an import, another pass) is
            # a clear 409 here rather than the insert's unique violation.
            if (
                learned_signature
                and Procedure.objects.filter(
                    workspace=workspace, agent_id=agent_id, learned_signature=learned_signature
                ).exists()
            ):
                raise _signature_taken()
            if parent is not None:
                latest = Procedure.objects.filter(workspace=workspace, agent=agent, name=name).aggregate(
                    v=Max("version")
                )["v"]
                version = (latest or 0) + 1
                # Only the newest version fires: the parent, and any version evolved from it
                # before (evolving v1 twice must not leave v2 active next to v3).
                _versions_deactivate(workspace=workspace, agent=agent, name=name, also=parent.pk)
            procedure = Procedure.objects.create(
                workspace=workspace,
                agent=agent,
                name=name,
                description=description or "",
                trigger_conditions=conditions,
                procedure_type=procedure_type,
                content=content,
                origin=origin,
                source_episode_ids=episode_ids,
                parent=parent,
                version=version,
                search_text=procedure_search_text(
                    name=name, description=description or "", trigger_conditions=conditions, content=content
                ),
                created_by=actor,
                learned_signature=learned_signature,
            )
            from procedures.tasks import procedure_embed_task

            procedure_embed_task.delay_on_commit([str(procedure.pk)])
            audit_record(
                workspace=workspace,
                actor=actor,
                action=AuditEvent.Action.CREATE,
                entity_type="procedure",
                entity_id=procedure.pk,
                changes={
                    "name": name,
                    "version": version,
                    "origin": origin,
                    "parent": str(parent.pk) if parent else None,
                },
            )
    except IntegrityError as exc:
        raise _conflict(exc) from None
    return procedure


def _versions_deactivate(*, workspace, agent, name: str, also=None, keep=None) -> int:
    """Deactivate every active version of `name` (for `agent`, or workspace-wide when None)
    and the procedure `also`, except `keep`. Returns the rows changed."""
    versions = Q(workspace=workspace, agent=agent, name=name)
    if also is not None:
        versions |= Q(pk=also)
    queryset = Procedure.objects.filter(versions, is_active=True)
    if keep is not None:
        queryset = queryset.exclude(pk=keep)
    return queryset.update(is_active=False, updated_at=timezone.now())


PROCEDURE_EDITABLE = ("name", "description", "trigger_conditions", "procedure_type", "content", "is_active")


def procedure_update(
    *,
    procedure: Procedure,
    actor: str,
    principal: Principal | None = None,
    lineage_held: bool = False,
    **fields,
) -> Procedure:
    """Edit a procedure in place (audited). To keep the old version, evolve it instead
    (procedure_create with `parent`). Activating a version deactivates the others of its
    lineage (a rollback); renaming an active version onto a lineage with an active one is a 409.

    `lineage_held`: the caller's transaction already holds procedure_lineage_lock for the
    lineage the procedure ends in (its new name, when renamed) and for the procedure itself, as
    a review decision does; the lock is then not asked for a second time."""
    procedure_change_authorize(principal=principal, procedure=procedure)
    unknown = set(fields) - set(PROCEDURE_EDITABLE)
    if unknown:
        raise ApplicationError(
            "Unknown field.", fields={name: ["Unknown field."] for name in sorted(unknown)}
        )
    if "name" in fields:
        fields["name"] = (fields["name"] or "").strip()
        if not fields["name"] or len(fields["name"]) > 200:
            raise _invalid("name", PROCEDURE_NAME_REQUIRED)
    if "procedure_type" in fields and fields["procedure_type"] not in Procedure.ProcedureType.values:
        raise _invalid("procedure_type", PROCEDURE_TYPE_UNKNOWN)
    if "content" in fields:
        _content_validate(fields["content"])
    if "trigger_conditions" in fields:
        fields["trigger_conditions"] = trigger_conditions_validate(fields["trigger_conditions"])
    if "description" in fields:
        fields["description"] = fields["description"] or ""
    changed = {name: value for name, value in fields.items() if getattr(procedure, name) != value}
    if not changed:
        return procedure
    for name, value in changed.items():
        setattr(procedure, name, value)
    procedure.search_text = procedure_search_text(
        name=procedure.name,
        description=procedure.description,
        trigger_conditions=procedure.trigger_conditions,
        content=procedure.content,
    )
    try:
        with transaction.atomic():
            deactivated = 0
            if procedure.is_active and {"is_active", "name"} & set(changed) and not lineage_held:
                procedure_lineage_lock(
                    workspace_id=procedure.workspace_id,
                    lineages=[(procedure.agent_id, procedure.name)],
                    also=procedure.pk,
                )
            if procedure.is_active and "is_active" in changed:
                # One version of a name fires: activating v1 again is a rollback from v2. The
                # others go first: the active-version index is checked at each statement.
                deactivated = _versions_deactivate(
                    workspace=procedure.workspace,
                    agent=procedure.agent_id,
                    name=procedure.name,
                    keep=procedure.pk,
                )
            procedure.save(update_fields=[*changed, "search_text", "updated_at"])
            if {"name", "description", "trigger_conditions"} & set(changed):
                from procedures.tasks import procedure_embed_task

                procedure_embed_task.delay_on_commit([str(procedure.pk)])
            audit_record(
                workspace=procedure.workspace,
                actor=actor,
                action=AuditEvent.Action.UPDATE,
                entity_type="procedure",
                entity_id=procedure.pk,
                changes={
                    "fields": sorted(changed),
                    **({"versions_deactivated": deactivated} if deactivated else {}),
                },
            )
    except IntegrityError as exc:
        raise _conflict(exc) from None
    return procedure


def procedure_record_run(*, procedure: Procedure, success: bool, duration_ms: int | None = None) -> Procedure:
    """Count one use. A single UPDATE with F expressions, so concurrent runs never lose a count."""
    if duration_ms is not None and duration_ms < 0:
        raise _invalid("duration_ms", PROCEDURE_DURATION_NEGATIVE)
    update = {
        "times_used": F("times_used") + 1,
        "last_used_at": timezone.now(),
        "success_count" if success else "failure_count": F("success_count" if success else "failure_count")
        + 1,
    }
    if duration_ms is not None:
        update["total_duration_ms"] = F("total_duration_ms") + duration_ms
        update["timed_runs"] = F("timed_runs") + 1
    Procedure.objects.filter(pk=procedure.pk).update(**update)
    procedure.refresh_from_db()
    return procedure


def _procedures_delete(*, workspace, ids: list, actor: str) -> dict:
    # Evolved children keep existing; their `parent` becomes NULL (SET NULL).
    children = Procedure.objects.filter(parent__in=ids).exclude(pk__in=ids).count()
    deleted, _ = Procedure.objects.filter(pk__in=ids).delete()
    audit_record_deletes(workspace=workspace, actor=actor, entity_type="procedure", ids=ids)
    return {"procedures": deleted, "children_unlinked": children}


def procedure_delete(*, procedure: Procedure, actor: str, principal: Principal | None = None) -> dict:
    procedure_change_authorize(principal=principal, procedure=procedure)
    with transaction.atomic():
        return _procedures_delete(workspace=procedure.workspace, ids=[procedure.pk], actor=actor)


def procedure_batch_delete(*, principal: Principal, ids, actor: str | None = None) -> dict:
    """Delete every procedure in `ids`, or nothing: an id the principal cannot see is a 404."""
    with transaction.atomic():
        # shared: workspace procedures (no agent) are visible to agent-bound keys, as in reads.
        found = references_resolve(
            Procedure.objects.only("pk", "agent_id"),
            principal,
            ids,
            shared=True,
            not_found=NotFoundError(PROCEDURES_NOT_FOUND, fields={"ids": ["Unknown id."]}),
        )
        # ...but deleting one is a change for every agent: all or nothing, like a missing id.
        for procedure in found:
            procedure_change_authorize(principal=principal, procedure=procedure)
        return _procedures_delete(
            workspace=principal.workspace, ids=[p.pk for p in found], actor=actor or principal.actor
        )


def procedure_embedding_text(procedure: Procedure) -> str:
    phrases = ", ".join(procedure.trigger_conditions.get("goal_contains", []))
    return f"{procedure.name}. {procedure.description} {phrases}".strip()


def procedure_embed_sweep(*, limit: int, before) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of active procedures created before `before` with no
    vector at all (core.lib.sweep.sweep_take's order): what a lost or failed task left behind."""
    from django.db.models import Exists, OuterRef

    from core.lib.sweep import sweep_take

    has_vector = ProcedureEmbedding.objects.filter(procedure=OuterRef("pk"))
    missing = Procedure.objects.filter(is_active=True, created_at__lt=before).filter(~Exists(has_vector))
    return sweep_take(missing, limit=limit)


def procedure_embed_batch(*, procedure_ids, provider=None) -> int:
    """(Re-)embed the procedures of `procedure_ids` whose text changed or that have no vector
    under their workspace's model. Idempotent. Returns the rows written.

    A procedure deleted while its vector was computed is skipped, and so is one whose text
    was edited meanwhile (the edit queued its own embedding): the vector is written only
    if the row, locked, still has the text it was computed from (compare-and-set).
    """
    import hashlib

    from core.embeddings import embedding_provider_for

    written = 0
    for procedure in Procedure.objects.filter(pk__in=list(procedure_ids)).select_related("workspace"):
        chosen = provider or embedding_provider_for(procedure.workspace)
        text = procedure_embedding_text(procedure)
        text_hash = hashlib.sha256(text.encode()).hexdigest()
        if ProcedureEmbedding.objects.filter(
            procedure=procedure, model=chosen.model_name, text_hash=text_hash
        ).exists():
            continue
        vector = chosen.embed([text])[0]
        with transaction.atomic():
            current = (
                Procedure.objects.filter(pk=procedure.pk)
                .select_for_update(no_key=True)
                .only("name", "description", "trigger_conditions")
                .first()
            )
            if current is None or procedure_embedding_text(current) != text:
                continue
            values = {"dimensions": len(vector), "embedding": vector, "text_hash": text_hash}
            updated = ProcedureEmbedding.objects.filter(procedure=procedure, model=chosen.model_name).update(
                **values
            )
            if not updated:
                ProcedureEmbedding.objects.bulk_create(
                    [
                        ProcedureEmbedding(
                            procedure=procedure,
                            model=chosen.model_name,
                            workspace_id=procedure.workspace_id,
                            **values,
                        )
                    ],
                    ignore_conflicts=True,
                )
        written += 1
    return written
