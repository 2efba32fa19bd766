"""Evidence of a memory ("why does the agent believe this?") and purge by source."""

from django.http import Http404
from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import SourceMessageForm
from browser.lib.rendering import render_page, toast
from core.errors import NotFoundError
from core.lib.replica import read_replica
from provenance.selectors import TIERS, derived_preview, evidence_get
from provenance.services import derived_purge
from threads.selectors import message_get, thread_get

TIER_LABELS = {"entry": "Episodic entry", "fact": "Fact", "episode": "Episode", "procedure": "Procedure"}
TIER_TABS = {"entry": "entries", "fact": "facts", "episode": "episodes", "procedure": "procedures"}


@read_replica
@workspace_view()
def evidence(request, tier, pk):
    if tier not in TIERS:
        raise Http404("No such tier.")
    try:
        data = evidence_get(principal=request.operator.principal, tier=tier, item_id=pk)
    except NotFoundError:
        raise Http404("No such memory.")
    context = {"tab": TIER_TABS[tier], "tier": tier, "tier_label": TIER_LABELS[tier], "item": data}
    return render_page(request, "memories/evidence.html", context, partials={"main": "evidence-panel"})


def _source(request, pk):
    """The thread (and, with ?message= or a posted `message`, one of its messages) or a 404:
    a message id that does not parse names no message, like one of another thread."""
    form = SourceMessageForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        raise Http404("No such message.")
    try:
        thread = thread_get(principal=request.operator.principal, thread_id=pk, related=False)
        message_id = form.cleaned_data["message"]
        message = message_get(thread=thread, message_id=message_id) if message_id else None
    except NotFoundError:
        raise Http404("No such thread or message.")
    return thread, message


def _derived_page(request, thread, message):
    preview = derived_preview(principal=request.operator.principal, thread=thread, message=message)
    context = {
        "tab": "threads",
        "thread": thread,
        "message": message,
        "preview": preview,
        "total": sum(kind["count"] for kind in preview.values()),
    }
    return render_page(request, "memories/derived.html", context, partials={"main": "derived-panel"})


@workspace_view(EDIT)
def derived(request, pk):
    """What the thread (or one message) backs, before deleting it."""
    thread, message = _source(request, pk)
    return _derived_page(request, thread, message)


@require_POST
@workspace_view(EDIT)
def derived_delete(request, pk):
    thread, message = _source(request, pk)
    counts = derived_purge(principal=request.operator.principal, thread=thread, message=message)
    text = (
        f"Deleted {counts['entries']} entries, {counts['facts']} facts "
        f"and {counts['procedures']} proposed procedures."
    )
    return toast(request, _derived_page(request, thread, message), text)
