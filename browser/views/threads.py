"""The Threads tab: conversations, their message tree, summary and current history window."""

from django.http import Http404
from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import ThreadEditForm
from browser.lib.listing import Sort
from browser.lib.rendering import render_page
from browser.lib.tabs import TabSpec, base_context, tab_delete, tab_detail, tab_edit, tab_list
from browser.selectors import THREAD_TREE_LIMIT, thread_message_tree, thread_tool_result
from core.errors import ApplicationError, NotFoundError
from core.lib.replica import read_replica
from threads.filters import ThreadFilter
from threads.selectors import message_history_window, thread_get, thread_list
from threads.services import thread_batch_delete


def _detail_context(principal, thread) -> dict:
    try:
        window = message_history_window(thread=thread)
    except ApplicationError:
        window = None
    rows, older = thread_message_tree(thread=thread, window_ids=window.message_ids if window else [])
    return {"tree": rows, "older_count": older, "window": window, "tree_limit": THREAD_TREE_LIMIT}


THREADS = TabSpec(
    slug="threads",
    item="thread",
    noun="thread",
    noun_plural="threads",
    template="memories/threads.html",
    filterset=ThreadFilter,
    list=lambda principal, filters: thread_list(principal=principal, filters=filters),
    get=lambda principal, pk: thread_get(principal=principal, thread_id=pk),
    sorts=[
        Sort("activity", "Last activity", "last_activity_at"),
        Sort("created", "Created", "created_at"),
        Sort("messages", "Messages", "message_count"),
        Sort("title", "Title", "title"),
    ],
    default_sort="-activity",
    batch_delete=lambda principal, ids: thread_batch_delete(principal=principal, ids=ids),
    edit_form=ThreadEditForm,
    detail_context=_detail_context,
)


@read_replica
@workspace_view()
def threads_tab(request):
    return tab_list(request, THREADS)


@read_replica
@workspace_view()
def thread_detail(request, pk):
    return tab_detail(request, THREADS, pk)


@workspace_view(EDIT)
def thread_edit(request, pk):
    return tab_edit(request, THREADS, pk)


@require_POST
@workspace_view(EDIT)
def threads_delete(request):
    return tab_delete(request, THREADS)


@read_replica
@workspace_view()
def thread_tool_result_view(request, pk, message_id):
    """A tool result whole: the long ones the thread page and the history window only preview.

    htmx asks for `result-<id>` to open it in place; otherwise it is a page of its own.
    """
    try:
        thread, message = thread_tool_result(
            principal=request.operator.principal, thread_id=pk, message_id=message_id
        )
    except NotFoundError:
        raise Http404("No such tool result.")
    context = {**base_context(THREADS, request), "thread": thread, "message": message, "page": "tool-result"}
    return render_page(
        request,
        THREADS.template,
        context,
        partials={f"result-{message.pk}": "tool-result-text", "main": "tool-result"},
    )
