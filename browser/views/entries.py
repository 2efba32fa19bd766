"""The Episodic entries tab: source-backed notes about a person, with status curation."""

from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import EntryEditForm
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from core.lib.replica import read_replica
from episodic.filters import EpisodicEntryFilter
from episodic.selectors import entry_get, entry_list
from episodic.services import entry_batch_delete

ENTRIES = TabSpec(
    slug="entries",
    item="entry",
    noun="episodic entry",
    noun_plural="episodic entries",
    template="memories/entries.html",
    filterset=EpisodicEntryFilter,
    list=lambda principal, filters: entry_list(principal=principal, filters=filters),
    get=lambda principal, pk: entry_get(principal=principal, entry_id=pk),
    sorts=[
        Sort("created", "Created", "created_at"),
        Sort("status", "Status", "status"),
    ],
    default_sort="-created",
    batch_delete=lambda principal, ids: entry_batch_delete(principal=principal, ids=ids),
    edit_form=EntryEditForm,
)


@read_replica
@workspace_view()
def entries_tab(request):
    return tab_list(request, ENTRIES)


@read_replica
@workspace_view()
def entry_detail(request, pk):
    return tab_detail(request, ENTRIES, pk)


@workspace_view(EDIT)
def entry_edit(request, pk):
    return tab_edit(request, ENTRIES, pk)


@require_POST
@workspace_view(EDIT)
def entries_delete(request):
    return tab_delete(request, ENTRIES)
