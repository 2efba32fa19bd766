import secrets
import time
from datetime import timedelta

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core.errors import ApplicationError, ConflictError
from core.events import audit_recorded
from core.lib.crypto import encrypt
from core.memory_settings import memory_settings_merge, memory_settings_validate
from core.models import Agent, ApiKey, AuditEvent, Membership, ProviderCredential, WorkerHeartbeat, Workspace
from core.selectors import api_key_cache_clear, api_key_hash, provider_cache_clear

WORKSPACE_EXISTS = "A workspace with this name already exists."
AGENT_EXISTS = "An agent with this slug already exists in the workspace."
# A century: past roughly 2.9 million days the expiry date leaves the calendar (OverflowError).
API_KEY_MAX_EXPIRES_DAYS = 36_500
API_KEY_EXPIRES_RANGE = f"Must be between 1 and {API_KEY_MAX_EXPIRES_DAYS} days."
API_KEY_AGENT_WORKSPACE = "The agent belongs to another workspace."


def workspace_create(*, name: str) -> Workspace:
    workspace = Workspace(name=name)
    workspace.full_clean(validate_unique=False, validate_constraints=False)
    try:
        with transaction.atomic():
            workspace.save()
    except IntegrityError as exc:
        raise ConflictError(WORKSPACE_EXISTS) from exc
    return workspace


def membership_set(*, workspace: Workspace, user, role: str) -> Membership:
    if role not in Membership.Role.values:
        raise ApplicationError(f"Unknown role '{role}'.", fields={"role": ["Unknown role."]})
    membership, _ = Membership.objects.update_or_create(
        workspace=workspace, user=user, defaults={"role": role}
    )
    if role == Membership.Role.ADMIN and not user.is_staff:
        # A workspace admin curates its rows in /admin/ too, whichever way they became one
        # (create_operator, the Members page, a role change); the admin itself shows them
        # only their admin workspaces (core.lib.admin), so staff is never taken away here.
        type(user).objects.filter(pk=user.pk).update(is_staff=True)
        user.is_staff = True
    return membership


def membership_remove(*, membership: Membership) -> None:
    membership.delete()


def operator_create(
    *, workspace: Workspace, username: str, password: str, role: str, email: str = "", staff: bool = False
):
    """Create (or update the password of) a Django user and make them a member.

    `staff=True` also lets them log into /admin/, where only their admin memberships open
    anything (core.lib.admin); it is never taken away here.
    """
    User = get_user_model()
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User(username=username, email=email)
        user.set_password(password)
        user.is_staff = user.is_staff or staff
        user.save()
        membership = membership_set(workspace=workspace, user=user, role=role)
    return membership


def operator_staff_grant(*, workspace: Workspace, username: str) -> bool:
    """Let the admin member `username` of `workspace` log into /admin/; True when it changed.

    Compare-and-set: two processes starting at once make the one change between them.
    """
    admins = Membership.objects.filter(workspace=workspace, role=Membership.Role.ADMIN).values("user_id")
    users = get_user_model().objects.filter(username=username, is_staff=False, pk__in=admins)
    return users.update(is_staff=True) > 0


def agent_get_or_create(*, workspace: Workspace, slug: str, name: str = "") -> Agent:
    agent = Agent(workspace=workspace, slug=slug, name=name or slug)
    agent.full_clean(validate_unique=False, validate_constraints=False)
    agent, _ = Agent.objects.get_or_create(workspace=workspace, slug=slug, defaults={"name": agent.name})
    return agent


class AgentRegisteredMeanwhile(Exception):
    """A pending agent's slug was registered by another request first: `agent` is its row."""

    def __init__(self, agent: Agent):
        super().__init__(agent.slug)
        self.agent = agent


def agent_pending(agent: Agent | None) -> bool:
    """Whether `agent` is one a request names for the first time, not stored yet
    (threads.selectors.memory_context_for_write)."""
    return agent is not None and agent._state.adding


def agent_pending_store(agent: Agent | None, *, refuse_other: bool = False) -> Agent | None:
    """`agent` as a stored row: a pending agent (threads.selectors.memory_context_for_write,
    unsaved, its id already set) is inserted. Call it inside the write's transaction, so a
    refused write rolls it back and registers no agent; the pending object stays unsaved, so a
    retried transaction inserts it again. When a concurrent request registered the same slug
    first, its row is returned, with another id: references the write built from the pending
    agent's id must move to it.

    `refuse_other`: raise AgentRegisteredMeanwhile instead, for a write whose checks read the
    agent's settings (review, dedupe, a tier switched off) or its rows before this point: the
    caller rolls back, having written nothing, and decides the write again for that row."""
    if not agent_pending(agent):
        return agent
    stored, _ = Agent.objects.get_or_create(
        workspace=agent.workspace, slug=agent.slug, defaults={"id": agent.pk, "name": agent.name}
    )
    # The request's workspace, so writes read `agent.workspace` without a query.
    stored.workspace = agent.workspace
    if refuse_other and stored.pk != agent.pk:
        raise AgentRegisteredMeanwhile(stored)
    return stored


def agent_pending_written(write, *, agent: Agent, **kwargs):
    """`write(agent=agent, **kwargs)`, a write that stores a pending `agent` with
    `agent_pending_store(refuse_other=True)`; when another request registered the slug first,
    the write again, whole, for that request's row (stored now, so this happens once)."""
    try:
        return write(agent=agent, **kwargs)
    except AgentRegisteredMeanwhile as registered:
        return write(agent=registered.agent, **kwargs)


def agent_register(*, workspace: Workspace, slug: str, name: str = "", memory_settings=None) -> Agent:
    agent = Agent(
        workspace=workspace,
        slug=slug,
        name=name or slug,
        memory_settings=memory_settings_validate(memory_settings or {}),
    )
    agent.full_clean(validate_unique=False, validate_constraints=False)
    try:
        with transaction.atomic():
            agent.save()
    except IntegrityError as exc:
        raise ConflictError(AGENT_EXISTS, fields={"slug": [AGENT_EXISTS]}) from exc
    return agent


def agent_update(*, agent: Agent, name: str | None = None, memory_settings=None) -> Agent:
    if name is not None:
        agent.name = name
    if memory_settings is not None:
        agent.memory_settings = memory_settings_merge(agent.memory_settings, memory_settings)
    agent.full_clean(validate_unique=False, validate_constraints=False)
    agent.save()
    # Agent-bound keys carry their agent in the key cache; drop it so settings apply now.
    api_key_cache_clear()
    return agent


def api_key_create(
    *,
    workspace: Workspace,
    agent: Agent | None = None,
    name: str = "",
    read_only: bool = False,
    expires_in_days: int | None = None,
    created_by=None,
) -> tuple[ApiKey, str]:
    """Create a key; returns it with its secret, which is never stored or shown again."""
    if expires_in_days is not None and not 0 < expires_in_days <= API_KEY_MAX_EXPIRES_DAYS:
        raise ApplicationError(
            f"expires_in_days: {API_KEY_EXPIRES_RANGE}", fields={"expires_in_days": [API_KEY_EXPIRES_RANGE]}
        )
    # A key of one workspace bound to another's agent would write that agent's id into this
    # workspace's rows and apply its settings here.
    if agent is not None and agent.workspace_id != workspace.pk:
        raise ApplicationError(API_KEY_AGENT_WORKSPACE, fields={"agent": [API_KEY_AGENT_WORKSPACE]})
    prefix = secrets.token_hex(6)
    secret = f"mem_{prefix}_{secrets.token_urlsafe(32).replace('_', '-')}"
    api_key = ApiKey.objects.create(
        workspace=workspace,
        agent=agent,
        name=name,
        prefix=prefix,
        secret_hash=api_key_hash(secret),
        read_only=read_only,
        expires_at=timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None,
        created_by=created_by,
    )
    return api_key, secret


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    # Compare-and-set: revoking twice keeps the first revocation time.
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db()
    api_key_cache_clear()
    return api_key


def api_keys_purge_expired(*, older_than_days: int = 30) -> int:
    """Delete keys that expired or were revoked more than `older_than_days` ago."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    deleted, _ = ApiKey.objects.filter(revoked_at__lt=cutoff).delete()
    expired, _ = ApiKey.objects.filter(expires_at__lt=cutoff).delete()
    return deleted + expired


def provider_credential_set(
    *,
    workspace: Workspace,
    purpose: str,
    base_url: str,
    model: str,
    api_key: str | None = None,
    private_allowed: bool = False,
) -> ProviderCredential:
    """Create or replace the endpoint; `api_key=None` keeps the stored key. `private_allowed`:
    the caller (a superuser) lets its host be a private address when requests are sent."""
    credential = ProviderCredential.objects.filter(workspace=workspace, purpose=purpose).first()
    if credential is None:
        credential = ProviderCredential(workspace=workspace, purpose=purpose)
    credential.base_url = base_url
    credential.model = model
    credential.private_allowed = private_allowed
    if api_key is not None:
        credential.api_key_encrypted = encrypt(api_key)
    credential.full_clean(validate_unique=False, validate_constraints=False)
    credential.save()
    provider_cache_clear()
    return credential


def worker_heartbeat_record(*, worker: str) -> None:
    WorkerHeartbeat.objects.update_or_create(worker=worker[:200], defaults={"beat_at": timezone.now()})


def audit_record(
    *, workspace, actor: str, action: str, entity_type: str, entity_id, changes=None
) -> AuditEvent:
    event = AuditEvent.objects.create(
        workspace=workspace,
        actor=actor,
        action=action,
        entity_type=entity_type,
        entity_id=str(entity_id),
        changes=changes or {},
    )
    audit_recorded(event.workspace_id, entity_type)
    return event


def audit_record_deletes(*, workspace, actor: str, entity_type: str, ids) -> None:
    """One delete event per id, written in a single INSERT (batch deletions)."""
    events = AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                workspace=workspace,
                actor=actor,
                action=AuditEvent.Action.DELETE,
                entity_type=entity_type,
                entity_id=str(pk),
            )
            for pk in ids
        ]
    )
    if events:
        audit_recorded(workspace.pk, entity_type)


# Columns a vector graph scope may name (core.lib.vectors): what the searches scope by.
VECTOR_GRAPH_SCOPE_COLUMNS = frozenset({"workspace_id", "agent_id", "memory_user_id"})
# Rows flagged per statement: each one is inserted into the HNSW graph (~2-7 ms a row at
# 100,000 vectors), so a statement holds its row locks for a second or two at most.
VECTOR_GRAPH_CHUNK = 500


def _vector_table_model(table: str):
    """The installed model whose table is `table` and whose rows carry `in_graph`."""
    for model in apps.get_models():
        if model._meta.db_table == table and any(f.name == "in_graph" for f in model._meta.concrete_fields):
            return model
    raise ValueError(f"{table!r} is not a vector table.")


def vector_graph_extend(*, table: str, model: str, scope: dict, seconds: float | None = None) -> int:
    """Put the vectors of `model` in `table` that match `scope` ({column: value}, columns of
    VECTOR_GRAPH_SCOPE_COLUMNS) into the model's HNSW graph; returns how many rows joined.

    In chunks of VECTOR_GRAPH_CHUNK rows, each its own statement; rows locked by another
    writer meanwhile are skipped (they stay outside the graph, where searches sort them
    exactly, until the next request). With `seconds`, no chunk starts after that long: the
    caller goes on later (`core.tasks.vector_graph_extend_task`). Idempotent.
    """
    table_model = _vector_table_model(table)
    columns = {f.column for f in table_model._meta.concrete_fields}
    if not scope or any(c not in VECTOR_GRAPH_SCOPE_COLUMNS or c not in columns for c in scope):
        raise ValueError(f"The graph's scope names a column it cannot: {sorted(scope)}.")
    if any(value is None for value in scope.values()):
        raise ValueError("The graph's scope must give every column a value.")
    names = sorted(scope)
    where = " AND ".join(f"{name} = %s" for name in names)
    # The chunk is chosen once, in a CTE. As `WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP
    # LOCKED)` the planner may rescan the subquery per row, and each rescan skips the rows this
    # statement has just updated and locks n more: one statement then took a whole scope.
    sql = (
        f"WITH chunk AS (SELECT id FROM {table} WHERE {where} AND model = %s AND NOT in_graph "
        "LIMIT %s FOR UPDATE SKIP LOCKED) "
        f"UPDATE {table} v SET in_graph = true FROM chunk WHERE v.id = chunk.id"
    )
    params = [*(scope[name] for name in names), model, VECTOR_GRAPH_CHUNK]
    total, started = 0, time.monotonic()
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql, params)
            if not cursor.rowcount:
                return total
            total += cursor.rowcount
            if seconds is not None and time.monotonic() - started >= seconds:
                return total
