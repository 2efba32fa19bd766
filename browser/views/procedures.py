"""The Procedures tab: how-to knowledge with its usage statistics and version chain."""

from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import ProcedureEditForm
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from core.lib.replica import read_replica
from procedures.filters import ProcedureFilter
from procedures.models import Procedure
from procedures.selectors import procedure_get, procedure_list
from procedures.services import procedure_batch_delete

PROCEDURES = TabSpec(
    slug="procedures",
    item="procedure",
    noun="procedure",
    noun_plural="procedures",
    template="memories/procedures.html",
    filterset=ProcedureFilter,
    list=lambda principal, filters: procedure_list(principal=principal, filters=filters),
    get=lambda principal, pk: procedure_get(principal=principal, procedure_id=pk),
    sorts=[
        Sort("name", "Name", "name"),
        Sort("version", "Version", "version"),
        Sort("used", "Used", "times_used"),
        Sort("successes", "Successes", "success_count"),
        Sort("last_used", "Last used", "last_used_at"),
        Sort("created", "Created", "created_at"),
    ],
    default_sort="-created",
    batch_delete=lambda principal, ids: procedure_batch_delete(principal=principal, ids=ids),
    model=Procedure,
    delete_shared=True,
    edit_form=ProcedureEditForm,
    detail_context=lambda principal, procedure: {
        "children": list(procedure.children.order_by("version")[:50])
    },
)


@read_replica
@workspace_view()
def procedures_tab(request):
    return tab_list(request, PROCEDURES)


@read_replica
@workspace_view()
def procedure_detail(request, pk):
    return tab_detail(request, PROCEDURES, pk)


@workspace_view(EDIT)
def procedure_edit(request, pk):
    return tab_edit(request, PROCEDURES, pk)


@require_POST
@workspace_view(EDIT)
def procedures_delete(request):
    return tab_delete(request, PROCEDURES)
