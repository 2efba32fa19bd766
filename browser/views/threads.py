"""The Threads tab: conversations, one branch of their message tree at a time, tool calls,
the compaction summary's span and the history window."""

from urllib.parse import urlencode

from django import forms
from django.http import Http404
from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import ThreadEditForm
from browser.lib.listing import Sort
from browser.lib.rendering import render_page
from browser.lib.tabs import TabSpec, base_context, tab_delete, tab_edit, tab_list
from browser.selectors.threads import (
    THREAD_TREE_LIMIT,
    thread_branch_leaf,
    thread_focus,
    thread_message_tree,
    thread_nodes,
    thread_tool_result,
)
from core.errors import ApplicationError, NotFoundError
from core.lib.replica import read_replica
from threads.filters import ThreadFilter
from threads.models import Thread
from threads.selectors import message_history_window, thread_get, thread_list
from threads.services import thread_batch_delete


class ThreadViewForm(forms.Form):
    """Which branch of the tree the thread page shows: all links and the node filter are GETs."""

    # Any message of the branch: the page follows it down to the branch's newest message.
    leaf = forms.UUIDField(required=False)
    # A message of the branch: the page shows the messages before it.
    before = forms.UUIDField(required=False)
    # "" is the main conversation. CharField refuses NUL, which PostgreSQL refuses in text.
    node = forms.CharField(required=False, max_length=100, strip=False)
    # A message to open the page at, highlighted: its branch, ending at it.
    focus = forms.UUIDField(required=False)


def _branch_context(request, thread) -> dict:
    """The tree part of the page; a value that does not parse is ignored and named, an id of
    no message of this thread is a 404 (as another workspace's would be)."""
    form = ThreadViewForm(request.GET)
    form.is_valid()
    params = form.cleaned_data
    node = params.get("node") or ""
    focus = params.get("focus")
    try:
        if focus is not None:
            node, leaf_id, params["before"] = thread_focus(thread=thread, message_id=focus)
        else:
            leaf_id = thread_branch_leaf(thread=thread, node=node, leaf=params.get("leaf"))
        window = None
        if leaf_id is not None:
            try:
                window = message_history_window(thread=thread, leaf=leaf_id, node=node or None)
            except ApplicationError:
                window = None
        branch = thread_message_tree(
            thread=thread,
            leaf_id=leaf_id,
            node=node,
            before=params.get("before"),
            window_ids=window.message_ids if window else (),
        )
    except NotFoundError:
        raise Http404("No such message in this thread.")
    nodes = thread_nodes(thread=thread)
    if node and node not in nodes:
        nodes.append(node)
    return {
        "branch": branch,
        "window": window,
        "node": node,
        "node_query": f"?{urlencode({'node': node})}" if node else "",
        "nodes": [n for n in nodes if n],
        "leaf_given": params.get("leaf") is not None or focus is not None,
        "focus": focus,
        "ignored": sorted(form.errors),
        "tree_limit": THREAD_TREE_LIMIT,
    }


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
    model=Thread,
    edit_form=ThreadEditForm,
)


@read_replica
@workspace_view()
def threads_tab(request):
    return tab_list(request, THREADS)


@read_replica
@workspace_view()
def thread_detail(request, pk):
    """The thread with one branch of its tree; htmx asks for `thread-tree` when a branch link
    or the node filter changes only the tree, and for `row-<id>` when an inline rename is
    cancelled."""
    try:
        thread = thread_get(principal=request.operator.principal, thread_id=pk)
    except NotFoundError:
        raise Http404("No such thread.")
    context = {**base_context(THREADS, request), "thread": thread, "page": "detail"}
    if request.htmx.target != f"row-{thread.pk}":
        context.update(_branch_context(request, thread))
    return render_page(
        request,
        THREADS.template,
        context,
        partials={"main": "thread-detail", "thread-tree": "thread-tree", f"row-{thread.pk}": "thread-row"},
    )


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
