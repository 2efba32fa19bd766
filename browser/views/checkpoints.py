"""The Checkpoints tab: suspended agent state per thread. The state is the client's and stays
read-only (shown decoded where it is JSON or plain msgpack); the metadata is editable."""

from django.conf import settings
from django.http import Http404
from django.views.decorators.http import require_GET, require_POST

from browser.access import EDIT, workspace_view
from browser.forms import CheckpointMetadataForm
from browser.lib.cards import card_edit
from browser.lib.listing import Sort
from browser.lib.payloads import payload_render
from browser.lib.rendering import render_page
from browser.lib.tabs import TabSpec, base_context, tab_delete, tab_detail, tab_list
from browser.selectors import checkpoint_get_by_id
from checkpoints.filters import CheckpointFilter
from checkpoints.models import Checkpoint
from checkpoints.selectors import checkpoint_list
from checkpoints.services import checkpoint_batch_delete
from core.errors import NotFoundError
from core.lib.replica import read_replica


def _list(principal, filters):
    # The state blobs can be large and the table never shows them.
    return checkpoint_list(principal=principal, filters=filters).select_related("thread").defer("data")


def _payload(checkpoint, max_chars: int):
    return payload_render(type_=checkpoint.type, data=checkpoint.data, max_chars=max_chars)


CHECKPOINTS = TabSpec(
    slug="checkpoints",
    item="checkpoint",
    noun="checkpoint",
    noun_plural="checkpoints",
    template="memories/checkpoints.html",
    filterset=CheckpointFilter,
    list=_list,
    get=lambda principal, pk: checkpoint_get_by_id(principal=principal, checkpoint_pk=pk),
    sorts=[
        Sort("created", "Created", "created_at"),
        Sort("checkpoint_id", "Checkpoint id", "checkpoint_id"),
    ],
    default_sort="-created",
    batch_delete=lambda principal, ids: checkpoint_batch_delete(principal=principal, ids=ids),
    model=Checkpoint,
    delete_agent_field="thread__agent",
    detail_context=lambda principal, checkpoint: {
        "payload": _payload(checkpoint, settings.CHECKPOINTS_BROWSER_PREVIEW_CHARS)
    },
)


@read_replica
@workspace_view()
def checkpoints_tab(request):
    return tab_list(request, CHECKPOINTS)


@read_replica
@workspace_view()
def checkpoint_detail(request, pk):
    return tab_detail(request, CHECKPOINTS, pk)


@require_POST
@workspace_view(EDIT)
def checkpoints_delete(request):
    return tab_delete(request, CHECKPOINTS)


@workspace_view(EDIT)
def checkpoint_edit(request, pk):
    return card_edit(
        request, CHECKPOINTS, pk, card="metadata", form_class=CheckpointMetadataForm, label="metadata"
    )


@require_GET
@read_replica
@workspace_view()
def checkpoint_state(request, pk):
    """The decoded state up to CHECKPOINTS_BROWSER_MAX_CHARS: the detail page's "show all"
    (HX-Target `checkpoint-state`), or a page of its own without JavaScript."""
    try:
        checkpoint = CHECKPOINTS.get(request.operator.principal, pk)
    except NotFoundError:
        raise Http404("No such checkpoint.")
    context = {
        **base_context(CHECKPOINTS, request),
        "checkpoint": checkpoint,
        "payload": _payload(checkpoint, settings.CHECKPOINTS_BROWSER_MAX_CHARS),
        "page": "state",
        "whole": True,
    }
    return render_page(
        request,
        CHECKPOINTS.template,
        context,
        partials={"checkpoint-state": "checkpoint-state", "main": "checkpoint-state-page"},
    )
