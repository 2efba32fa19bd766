"""Who is calling, and the one place that scopes a queryset to what they may see.

A `Principal` is built from an API key (REST) or from an operator's membership (browser).
Objects outside the principal's workspace, or of another agent for an agent-bound key,
are reported as 404, never 403.
"""

from dataclasses import dataclass

from django.db.models import QuerySet

from core.errors import AGENT_REQUIRED, READ_ONLY_KEY, ApplicationError, NotFoundError
from core.models import Agent, ApiKey, Membership, Workspace


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


def scope_to_principal(queryset: QuerySet, principal: Principal, *, agent_field: str | None = "agent"):
    """Restrict `queryset` to the principal's workspace and, for agent-bound keys, its agent.

    `agent_field` names the row's agent foreign key; pass None for rows that belong to the
    workspace as a whole (memory users, workspace-scope facts).
    """
    queryset = queryset.filter(workspace=principal.workspace)
    if agent_field and principal.agent is not None:
        queryset = queryset.filter(**{agent_field: principal.agent})
    return queryset


def agent_resolve(principal: Principal, slug: str | None, *, create: bool = True) -> Agent:
    """The agent a request acts for.

    An agent-bound key always acts for its agent (naming another one is a 404). A
    workspace-wide key names the agent by slug; a writable key registers an unknown slug
    on first use, which is how agents appear without a separate registration step.
    """
    from core.services import agent_get_or_create

    if principal.agent is not None:
        if slug and slug != principal.agent.slug:
            raise NotFoundError(f"Agent '{slug}' not found.")
        return principal.agent
    if not slug:
        raise ApplicationError(AGENT_REQUIRED, code="agent_required", fields={"agent": [AGENT_REQUIRED]})
    agent = Agent.objects.filter(workspace=principal.workspace, slug=slug).first()
    if agent is not None:
        return agent
    if not create or not principal.can_write:
        raise NotFoundError(f"Agent '{slug}' not found.")
    return agent_get_or_create(workspace=principal.workspace, slug=slug)
