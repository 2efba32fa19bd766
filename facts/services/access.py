"""Who may change a fact of the whole workspace (scope global), and whom a write acts for.

A global fact is read by every agent of the workspace. An agent-bound key reads it, confirms
it (the same value again) and creates a global key that has no open version, but never
changes one for the others: a different value it remembers, or a new key that would
supersede one (cross-key consolidation), is held for an operator's review
(facts.services.remember), and editing, deleting or approving a change of one is a 403
`workspace_key_required` (core.access.require_workspace_key, as for workspace-wide
procedures). Extraction on behalf of an agent is held the same way. The one exception is a
delete: the agent's key may withdraw its own proposal while it waits for review
(`fact_delete_authorize`), which changes nothing another agent reads. Workspace-wide keys,
operators and the system change global facts as before; user, agent and session facts are
not concerned.
"""

from core.access import Principal, require_workspace_key
from facts.models import Fact


def fact_change_authorize(*, fact: Fact, principal: Principal | None) -> None:
    """Refuse an agent-bound key any direct change of a global fact: 403
    `workspace_key_required`. Other scopes are not looked at. None is a caller with no key:
    an operator, the admin, the system (as procedures.services.procedure_change_authorize)."""
    if fact.scope == Fact.Scope.GLOBAL and principal is not None:
        require_workspace_key(principal)


def fact_global_writer_agent(*, principal: Principal | None, source: str, agent):
    """The agent a write of a global fact acts for when it may not change an open global
    version: an agent-bound key's agent, or, for a caller with no key, the agent whose
    conversation an extraction read (`agent`). None when the write applies as it is."""
    if principal is not None:
        return principal.agent
    if source == Fact.Source.EXTRACTION:
        return agent
    return None


def fact_delete_authorize(*, fact: Fact, principal: Principal | None) -> None:
    """`fact_change_authorize` for a delete, but an agent-bound key may withdraw its own
    agent's proposal for a global fact while it is held (`review_agent` is the key's agent):
    no agent reads it, and the key could already reject it in review. The current global
    value, another agent's proposal and a proposal already decided (rejected or merged:
    deleting a rejection would let the agent propose that value again) stay a 403. The
    caller holds the row's lock, so an approval cannot turn it into the current value first."""
    if (
        principal is not None
        and principal.agent is not None
        and fact.review == Fact.Review.HELD
        and fact.review_agent_id == principal.agent.pk
    ):
        return
    fact_change_authorize(fact=fact, principal=principal)
