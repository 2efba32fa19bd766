"""The Checkpoints tab: suspended agent state per thread (read and delete; blobs are opaque)."""

from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_list
from browser.selectors import checkpoint_get_by_id
from checkpoints.filters import CheckpointFilter
from checkpoints.selectors import checkpoint_list
from checkpoints.services import checkpoint_batch_delete
from core.lib.replica import read_replica


def _list(principal, filters):
    # The state blobs can be large and the table never shows them.
    return checkpoint_list(principal=principal, filters=filters).select_related("thread").defer("data")


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
