"""The Store tab: LangGraph long-term store items by namespace, with search, inline edit of
the value JSON and batch delete."""

import json

from django import forms
from django.views.decorators.http import require_POST

from browser.access import EDIT, workspace_view
from browser.lib.listing import Sort
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from core.lib.replica import read_replica
from core.parsers import json_loads_checked
from store.filters import StoreItemFilter
from store.models import StoreItem
from store.selectors import store_item_get_by_id, store_item_list
from store.services import store_item_batch_delete, store_item_update_value

VALUE_NOT_JSON_OBJECT = 'The value must be a JSON object, for example {"text": "Ada lives in Lisbon."}.'


class StoreItemEditForm(forms.Form):
    value = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        help_text="JSON object. Saving re-indexes the item for search.",
    )

    @staticmethod
    def initial_for(item):
        return {"value": json.dumps(item.value, ensure_ascii=False, indent=2, sort_keys=True)}

    def clean_value(self):
        try:
            value = json_loads_checked(self.cleaned_data["value"])
        except (TypeError, ValueError):
            raise forms.ValidationError(VALUE_NOT_JSON_OBJECT)
        if not isinstance(value, dict):
            raise forms.ValidationError(VALUE_NOT_JSON_OBJECT)
        return value

    def update(self, principal, item):
        return store_item_update_value(item=item, value=self.cleaned_data["value"], actor=principal.actor)


STORE = TabSpec(
    slug="store",
    item="store-item",
    noun="store item",
    noun_plural="store items",
    template="memories/store.html",
    filterset=StoreItemFilter,
    list=lambda principal, filters: store_item_list(principal=principal, filters=filters),
    get=lambda principal, pk: store_item_get_by_id(principal=principal, item_id=pk),
    sorts=[
        Sort("namespace", "Namespace", "namespace_path"),
        Sort("key", "Key", "key"),
        Sort("updated", "Updated", "updated_at"),
        Sort("expires", "Expires", "expires_at"),
    ],
    # store_item_recent (workspace, -updated_at) serves the first page.
    default_sort="-updated",
    batch_delete=lambda principal, ids: store_item_batch_delete(principal=principal, ids=ids),
    model=StoreItem,
    edit_form=StoreItemEditForm,
    context_name="store_item",
)


@read_replica
@workspace_view()
def store_tab(request):
    return tab_list(request, STORE)


@read_replica
@workspace_view()
def store_item_detail(request, pk):
    return tab_detail(request, STORE, pk)


@workspace_view(EDIT)
def store_item_edit(request, pk):
    return tab_edit(request, STORE, pk)


@require_POST
@workspace_view(EDIT)
def store_delete(request):
    return tab_delete(request, STORE)
