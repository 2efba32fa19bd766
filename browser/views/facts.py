"""The Facts tab: current versions by default, each with its version history."""

from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.forms import FactEditForm
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from core.lib.replica import read_replica
from facts.filters import FactFilter
from facts.models import Fact
from facts.selectors import fact_get, fact_history, fact_lineage, fact_list
from facts.services import fact_batch_delete

FACTS = TabSpec(
    slug="facts",
    item="fact",
    noun="fact",
    noun_plural="facts",
    template="memories/facts.html",
    filterset=FactFilter,
    list=lambda principal, filters: fact_list(principal=principal, filters=filters),
    get=lambda principal, pk: fact_get(principal=principal, fact_id=pk),
    sorts=[
        Sort("key", "Key", "key"),
        Sort("confidence", "Confidence", "confidence"),
        Sort("confirmed", "Confirmed", "times_confirmed"),
        Sort("accessed", "Reads", "access_count"),
        Sort("valid_from", "Valid from", "valid_from"),
    ],
    # Alphabetical by default: facts_key_history (workspace, key, ...) serves it, so the first
    # page never sorts the whole workspace; newest-first is one click on "Valid from".
    default_sort="key",
    batch_delete=lambda principal, ids: fact_batch_delete(principal=principal, ids=ids),
    model=Fact,
    delete_shared=True,
    edit_form=FactEditForm,
    detail_context=lambda principal, fact: {
        "history": list(fact_history(fact=fact)[:200]),
        **fact_lineage(fact=fact),
    },
)


@read_replica
@workspace_view()
def facts_tab(request):
    return tab_list(request, FACTS)


@read_replica
@workspace_view()
def fact_detail(request, pk):
    return tab_detail(request, FACTS, pk)


@workspace_view(EDIT)
def fact_edit(request, pk):
    return tab_edit(request, FACTS, pk)


@require_POST
@workspace_view(EDIT)
def facts_delete(request):
    return tab_delete(request, FACTS)
