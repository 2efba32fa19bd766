"""Who is calling, and the one place that scopes a queryset to what they may see.

A `Principal` is built from an API key (REST) or from an operator's membership (browser).
Objects outside the principal's workspace, or of another agent for an agent-bound key,
are reported as 404, never 403.

The rule for agent-bound keys: such a key reads and changes only rows of its agent; rows
of the workspace as a whole (memory users, user- and global-scope facts) are visible to it.
Ids named in a request body or query string are resolved through the same scope
(`references_resolve`), so an id out of scope answers exactly like one that does not exist.
Erasing, merging and editing a person, and registering an agent, are workspace-level acts
(`require_workspace_key`): 403 for an agent-bound key.
"""

from dataclasses import dataclass

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q, QuerySet

from core.errors import AGENT_REQUIRED, READ_ONLY_KEY, ApplicationError, NotFoundError
from core.lib.rows import ModelRows
from core.models import Agent, ApiKey, Membership, Workspace

WORKSPACE_KEY_REQUIRED = (
    "This API key is bound to an agent; this is a workspace-level act and needs a workspace-wide key."
)


@dataclass(frozen=True)
class Principal:
    workspace: Workspace
    role: str
    api_key: ApiKey | None = None
    user: object | None = None
    agent: Agent | None = None

    # DRF's IsAuthenticated and templates read these.
    is_authenticated = True
    is_anonymous = False

    @property
    def can_write(self) -> bool:
        return self.role in (Membership.Role.EDITOR, Membership.Role.ADMIN)

    @property
    def can_admin(self) -> bool:
        return self.role == Membership.Role.ADMIN

    @property
    def actor(self) -> str:
        """The label stored in audit events."""
        if self.api_key is not None:
            return f"api_key:{self.api_key.prefix}"
        if self.user is not None:
            return f"operator:{self.user.get_username()}"
        return "system"


def principal_for_api_key(api_key: ApiKey) -> Principal:
    role = Membership.Role.VIEWER if api_key.read_only else Membership.Role.EDITOR
    return Principal(workspace=api_key.workspace, role=role, api_key=api_key, agent=api_key.agent)


def principal_for_membership(membership: Membership) -> Principal:
    return Principal(workspace=membership.workspace, role=membership.role, user=membership.user)


def require_write(principal: Principal) -> None:
    if not principal.can_write:
        raise ApplicationError(READ_ONLY_KEY, code="read_only", status_code=403)


def require_workspace_key(principal: Principal) -> None:
    """Refuse agent-bound keys: the act reaches rows of every agent of the workspace."""
    if principal.agent is not None:
        raise ApplicationError(WORKSPACE_KEY_REQUIRED, code="workspace_key_required", status_code=403)


def scope_to_principal(
    queryset: QuerySet, principal: Principal, *, agent_field: str | None = "agent", shared: bool = False
):
    """Restrict `queryset` to the principal's workspace and, for agent-bound keys, its agent.

    `agent_field` names the row's agent foreign key; pass None for rows that belong to the
    workspace as a whole (memory users). `shared=True` is for tables mixing both kinds: a
    row with no agent (a user- or global-scope fact, a workspace procedure) is the
    workspace's, visible to every key of it.
    """
    queryset = queryset.filter(workspace=principal.workspace)
    if agent_field and principal.agent is not None:
        own = Q(**{agent_field: principal.agent})
        if shared:
            own |= Q(**{f"{agent_field}__isnull": True})
        queryset = queryset.filter(own)
    return queryset


def references_resolve(
    queryset: QuerySet,
    principal: Principal,
    ids,
    *,
    not_found: ApplicationError,
    agent_field: str | None = "agent",
    shared: bool = False,
) -> list:
    """The rows of `queryset` named by `ids`, in that order (duplicates once), that the
    principal may read, else `not_found` is raised.

    Every id that arrives in a request body or query string is resolved here, through
    `scope_to_principal` (the scope of a read), so a row of another workspace or agent
    raises the very error an id that never existed raises: the answer is no existence oracle.
    """
    to_python = queryset.model._meta.pk.to_python
    try:
        # Parsed the way the column compares, so "ABC…" and "abc…" name one row.
        ids = list(dict.fromkeys(to_python(pk) for pk in ids))
    except DjangoValidationError:
        raise not_found from None
    if not ids:
        return []
    # Unordered: the rows come back in the order of `ids`, and compiling the model's default
    # ordering was a fifth of resolving one id.
    scoped = scope_to_principal(queryset, principal, agent_field=agent_field, shared=shared)
    rows = {row.pk: row for row in scoped.filter(pk__in=ids).order_by()}
    if len(rows) != len(ids):
        raise not_found
    return [rows[pk] for pk in ids]


def reference_resolve(
    queryset: QuerySet,
    principal: Principal,
    pk,
    *,
    not_found: ApplicationError,
    agent_field: str | None = "agent",
    shared: bool = False,
):
    """`references_resolve` for one id; None for None."""
    if pk is None or pk == "":
        return None
    rows = references_resolve(
        queryset, principal, [pk], not_found=not_found, agent_field=agent_field, shared=shared
    )
    return rows[0]


def agent_resolve_optional(principal: Principal, slug: str | None, *, create: bool = True) -> Agent | None:
    """`agent_resolve` for requests where the agent is optional: None when no slug is named
    and the key is not bound to an agent."""
    if not slug and principal.agent is None:
        return None
    return agent_resolve(principal, slug, create=create)


_AGENT_BY_SLUG = ModelRows(Agent)


def agent_resolve(
    principal: Principal, slug: str | None, *, create: bool = True, pending: bool = False
) -> Agent:
    """The agent a request acts for.

    An agent-bound key always acts for its agent (naming another one is a 404). A
    workspace-wide key names the agent by slug; a writable key registers an unknown slug
    on first use, which is how agents appear without a separate registration step.

    With `pending`, that unknown slug is not stored: the answer is an unsaved `Agent`, its
    slug checked and its id set, for a write to store inside its own transaction
    (core.services.agent_pending_store), so a refused write registers no agent. The slug
    is looked up once either way.
    """
    from core.services import agent_get_or_create

    if principal.agent is not None:
        if slug and slug != principal.agent.slug:
            raise NotFoundError(f"Agent '{slug}' not found.")
        return principal.agent
    if not slug:
        raise ApplicationError(AGENT_REQUIRED, code="agent_required", fields={"agent": [AGENT_REQUIRED]})
    # A workspace-wide key names its agent in every call: a statement built once (compiled by
    # the ORM, the lookup took 1.0-1.1 ms against 0.4; docs/speed.md).
    rows = _AGENT_BY_SLUG.fetch("WHERE workspace_id = %s AND slug = %s", [principal.workspace.pk, slug])
    if rows:
        return rows[0]
    if not (create or pending) or not principal.can_write:
        raise NotFoundError(f"Agent '{slug}' not found.")
    if pending:
        agent = Agent(workspace=principal.workspace, slug=slug, name=slug)
        # agent_get_or_create's checks of the slug, before anything is stored; the key's own
        # workspace needs no query to say it exists.
        agent.full_clean(exclude=["workspace"], validate_unique=False, validate_constraints=False)
        return agent
    return agent_get_or_create(workspace=principal.workspace, slug=slug)
