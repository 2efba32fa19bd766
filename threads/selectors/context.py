"""The context of a tool call: the agent, the person and the thread its ids name, resolved
in the caller's scope. Every tier's tool endpoints start here."""

from dataclasses import dataclass

from core.access import Principal, agent_resolve, reference_resolve
from core.errors import NotFoundError
from core.models import Agent
from identities.selectors import memory_user_in_scope, memory_user_resolve_merged
from threads.models import Thread
from threads.selectors.threads import THREAD_NOT_FOUND

THREAD_OTHER_AGENT = "This thread belongs to another agent."


@dataclass(frozen=True)
class MemoryContext:
    """Who is asking: the agent, the person it talks to, and the conversation."""

    workspace: object
    agent: Agent | None = None
    memory_user: object | None = None
    thread: object | None = None


def memory_context_resolve(
    *, principal: Principal, agent: str | None = None, memory_user=None, thread=None
) -> MemoryContext:
    """Resolve the ids a tool call names into a context, all within the caller's workspace.

    An agent-bound key always acts for its agent. A thread implies its agent and memory
    user when those are not given; a thread of another agent is a 404. A merged memory
    user resolves to the user it was merged into. An unknown agent slug is a 404: a write
    that registers it resolves with memory_context_for_write.
    """
    return _memory_context(
        principal=principal, agent=agent, memory_user=memory_user, thread=thread, pending=False
    )


def memory_context_for_write(
    *, principal: Principal, agent: str | None = None, memory_user=None, thread=None
) -> MemoryContext:
    """memory_context_resolve for a write that may register its agent. A writable
    workspace-wide key registers an unknown agent slug on first use (core.access.agent_resolve);
    created while the ids were resolved, that agent outlived every refusal after it (a field
    error, a 404 for the person, a 403, a database failure). Here such a slug is an unsaved
    `Agent` (its id set, so a reference can name it), which the write stores inside its own
    transaction with core.services.agent_pending_store. Nothing is written here, and the slug
    is looked up once, as memory_context_resolve looks it up (episodic/tests/test_add_path.py)."""
    return _memory_context(
        principal=principal, agent=agent, memory_user=memory_user, thread=thread, pending=True
    )


def _memory_context(*, principal: Principal, agent, memory_user, thread, pending: bool) -> MemoryContext:
    workspace = principal.workspace
    # Resolved in the principal's read scope: another agent's thread answers like an unknown
    # one (THREAD_OTHER_AGENT below is only for rows the key may read).
    thread_obj = reference_resolve(
        Thread.objects.select_related("agent"),
        principal,
        thread or None,
        not_found=NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_NOT_FOUND]}),
    )
    agent_obj = None
    if agent or principal.agent is not None:
        agent_obj = agent_resolve(principal, agent, create=False, pending=pending)
    elif thread_obj is not None:
        agent_obj = thread_obj.agent
    # A pending agent has a new id, so a visible thread is some other agent's: a new agent has none.
    if thread_obj is not None and agent_obj is not None and thread_obj.agent_id != agent_obj.pk:
        raise NotFoundError(THREAD_NOT_FOUND, fields={"thread": [THREAD_OTHER_AGENT]})
    user_obj = None
    if memory_user:
        user_obj = memory_user_in_scope(principal=principal, memory_user_id=memory_user)
        user_obj = memory_user_resolve_merged(memory_user=user_obj)
    elif thread_obj is not None and thread_obj.memory_user_id:
        user_obj = memory_user_resolve_merged(memory_user=thread_obj.memory_user)
    return MemoryContext(workspace=workspace, agent=agent_obj, memory_user=user_obj, thread=thread_obj)
