"""Reads of threads and their stored messages, scoped to the principal."""

from core.access import Principal, scope_to_principal
from core.errors import ApplicationError, NotFoundError
from threads.filters import ThreadFilter
from threads.models import Message, Thread

THREAD_NOT_FOUND = "Thread not found."
MESSAGE_NOT_FOUND = "Message not found."


def thread_scoped_queryset(*, principal: Principal):
    return scope_to_principal(Thread.objects.all(), principal)


def thread_get(*, principal: Principal, thread_id, related: bool = True) -> Thread:
    """The thread `thread_id` if the principal may see it, else NotFoundError.

    `related=False` loads only the columns the checkpoint endpoints need (one narrow row).
    """
    queryset = thread_scoped_queryset(principal=principal).filter(pk=thread_id)
    if related:
        queryset = queryset.select_related("agent", "memory_user", "workspace")
    else:
        queryset = queryset.only("id", "workspace_id", "agent_id", "last_activity_at")
    thread = queryset.first()
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
