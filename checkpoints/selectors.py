from django.db.models import Prefetch

from checkpoints.filters import CheckpointFilter
from checkpoints.models import Checkpoint, CheckpointWrite
from core.access import Principal, scope_to_principal
from core.errors import ApplicationError, NotFoundError
from threads.models import Thread

CHECKPOINT_NOT_FOUND = "Checkpoint not found."
# A list returns at most this many checkpoints per request (LangGraph pages with `before`).
LIST_MAX_LIMIT = 1_000


def _with_writes(queryset):
    return queryset.prefetch_related(
        Prefetch("writes", queryset=CheckpointWrite.objects.order_by("task_path", "task_id", "idx"))
    )


def checkpoint_scoped_queryset(*, principal: Principal):
    return scope_to_principal(Checkpoint.objects.all(), principal, agent_field="thread__agent")


def _thread_checkpoints(*, thread, principal, thread_id):
    """A thread's checkpoints; with `principal` and `thread_id`, scoped in the same query
    (a thread the principal cannot see has, for it, no checkpoints: 404)."""
    if thread is not None:
        return Checkpoint.objects.filter(thread=thread)
    return checkpoint_scoped_queryset(principal=principal).filter(thread_id=thread_id)


def checkpoint_latest(
    *,
    thread: Thread | None = None,
    checkpoint_ns: str = "",
    principal: Principal | None = None,
    thread_id=None,
) -> Checkpoint:
    """The newest checkpoint of a namespace (greatest id), with its pending writes."""
    queryset = _thread_checkpoints(thread=thread, principal=principal, thread_id=thread_id)
    checkpoint = _with_writes(queryset.filter(checkpoint_ns=checkpoint_ns)).order_by("-checkpoint_id").first()
    if checkpoint is None:
        raise NotFoundError(CHECKPOINT_NOT_FOUND)
    return checkpoint


def checkpoint_get(
    *,
    checkpoint_id: str,
    thread: Thread | None = None,
    checkpoint_ns: str = "",
    with_writes: bool = True,
    principal: Principal | None = None,
    thread_id=None,
) -> Checkpoint:
    queryset = _thread_checkpoints(thread=thread, principal=principal, thread_id=thread_id).filter(
        checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id
    )
    if with_writes:
        queryset = _with_writes(queryset)
    else:
        queryset = queryset.defer("data")
    checkpoint = queryset.first()
    if checkpoint is None:
        raise NotFoundError(CHECKPOINT_NOT_FOUND)
    return checkpoint


def _filtered(queryset, filters):
    filterset = CheckpointFilter(filters or {}, queryset=queryset)
    if not filterset.is_valid():
        raise ApplicationError("Invalid filters.", fields=dict(filterset.errors))
    return filterset.qs


def checkpoint_list_for_thread(*, thread: Thread, filters=None):
    """A thread's checkpoints, newest first. `checkpoint_ns` names one namespace, and an empty
    one the root graph's (a LangGraph saver's `list` sends it so); absent, every namespace."""
    queryset = Checkpoint.objects.filter(thread=thread)
    # django-filter skips an empty value, which here names the root namespace. Only this
    # list reads it so: in the browser's filter form an empty field means any namespace.
    if filters is not None and "checkpoint_ns" in filters and filters.get("checkpoint_ns") == "":
        queryset = queryset.filter(checkpoint_ns="")
    return _with_writes(_filtered(queryset, filters)).order_by("-checkpoint_id", "checkpoint_ns")


def checkpoint_list(*, principal: Principal, filters=None):
    queryset = checkpoint_scoped_queryset(principal=principal)
    return _with_writes(_filtered(queryset, filters)).order_by("-created_at", "-id")
