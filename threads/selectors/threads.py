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


# Every thread call starts here: a statement built once (compiled by the ORM with its three
# joins, the lookup took ~0.6 ms more; docs/speed.md, "The thread every thread call reads").
_THREAD_RELATED = ModelRows(Thread, related=("agent", "memory_user", "workspace"))
_THREAD_IN_WORKSPACE = 'WHERE "threads_thread"."id" = %s AND "threads_thread"."workspace_id" = %s'
_THREAD_OF_AGENT = f'{_THREAD_IN_WORKSPACE} AND "threads_thread"."agent_id" = %s'


def thread_get(*, principal: Principal, thread_id, related: bool = True) -> Thread:
    """The thread `thread_id` if the principal may see it, else NotFoundError.

    The scope is `scope_to_principal`'s: the principal's workspace and, for an agent-bound
    key, its agent. `related=False` loads only the columns the checkpoint endpoints need
    (one narrow row).
    """
    if related:
        # Parsed as the ORM parses a lookup on the key (a malformed id raises the same error).
        pk = Thread._meta.pk.to_python(thread_id)
        params = [pk, principal.workspace.pk]
        if principal.agent is not None:
            params.append(principal.agent.pk)
        rows = _THREAD_RELATED.fetch(_THREAD_OF_AGENT if principal.agent else _THREAD_IN_WORKSPACE, params)
        thread = rows[0] if rows else None
    else:
        queryset = thread_scoped_queryset(principal=principal).filter(pk=thread_id)
        thread = queryset.only("id", "workspace_id", "agent_id", "last_activity_at").first()
    if thread is None:
        raise NotFoundError(THREAD_NOT_FOUND)
    return thread


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
