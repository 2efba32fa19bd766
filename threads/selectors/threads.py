"""Reads of threads and their stored messages, scoped to the principal."""

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError, NotFoundError
from core.lib.rows import ModelRows
from threads.filters import ThreadFilter
from threads.models import Message, Thread

THREAD_NOT_FOUND = "Thread not found."
MESSAGE_NOT_FOUND = "Message not found."


def thread_scoped_queryset(*, principal: Principal):
    return scope_to_principal(Thread.objects.all(), principal)


# Every thread call starts here: statements built once (compiled by the ORM with its three
# joins, the lookup took 1.8-2.0 ms p50 against 0.6-0.9; docs/speed.md, "Thread calls").
_THREAD_RELATED = ModelRows(Thread, related=("agent", "memory_user", "workspace"))
_THREAD_IN_WORKSPACE = 'WHERE "threads_thread"."id" = %s AND "threads_thread"."workspace_id" = %s'
_THREAD_OF_AGENT = f'{_THREAD_IN_WORKSPACE} AND "threads_thread"."agent_id" = %s'
# What the checkpoint and provenance endpoints need (LangGraph writes a checkpoint a step).
_THREAD_NARROW = ModelRows(Thread, only=("workspace_id", "agent_id", "last_activity_at"))


def thread_get(*, principal: Principal, thread_id, related: bool = True) -> Thread:
    """The thread `thread_id` if the principal may see it, else NotFoundError.

    The scope is `scope_to_principal`'s: the principal's workspace and, for an agent-bound
    key, its agent. `related=False` loads only the columns the checkpoint endpoints need
    (one narrow row).
    """
    # Parsed as the ORM parses a lookup on the key (a malformed id raises the same error).
    params = [Thread._meta.pk.to_python(thread_id), principal.workspace.pk]
    if principal.agent is not None:
        params.append(principal.agent.pk)
    rows = (_THREAD_RELATED if related else _THREAD_NARROW).fetch(
        _THREAD_OF_AGENT if principal.agent else _THREAD_IN_WORKSPACE, params
    )
    if not rows:
        raise NotFoundError(THREAD_NOT_FOUND)
    return rows[0]


def thread_for_turn(*, workspace, thread_id, agent=None, agent_slug: str = "") -> Thread | None:
    """The thread `thread_id` of `workspace` and of `agent` (or of the agent named `agent_slug`),
    with its agent, person and workspace; None when there is no such thread.

    The context of an agent's turn that names its thread starts here (runtime.services)."""
    params = [thread_id, workspace.pk]
    if agent is not None:
        where = _THREAD_OF_AGENT
        params.append(agent.pk)
    else:
        where = (
            f'{_THREAD_IN_WORKSPACE} AND "threads_thread"."agent_id" = '
            "(SELECT id FROM core_agent WHERE workspace_id = %s AND slug = %s)"
        )
        params += [workspace.pk, agent_slug]
    rows = _THREAD_RELATED.fetch(where, params)
    return rows[0] if rows else None


def thread_list(*, principal: Principal, filters=None):
    queryset = thread_scoped_queryset(principal=principal).select_related("agent", "memory_user")
    filterset = ThreadFilter(filters or {}, queryset=queryset, workspace=principal.workspace)
    if not filterset.is_valid():
        raise ApplicationError("Invalid filters.", fields=dict(filterset.errors))
    return filterset.qs.order_by("-last_activity_at", "-id")


def message_list(*, thread: Thread, node: str | None = None):
    queryset = Message.objects.filter(thread=thread)
    if node is not None:
        queryset = queryset.filter(node_id=node)
    return queryset.order_by("seq")


def message_get(*, thread: Thread, message_id) -> Message:
    message = Message.objects.filter(thread=thread, pk=message_id).first()
    if message is None:
        raise NotFoundError(MESSAGE_NOT_FOUND)
    return message
