"""Admin of the store: items curated (value edited through the service, deletes audited);
vectors listed, never shown."""

from django import forms
from django.contrib import admin, messages

from core.lib.admin import (
    VectorAdmin,
    WorkspaceScopedAdmin,
    admin_actor,
    audit_history_html,
    batch_delete_by_workspace,
)
from store.models import StoreItem, StoreItemEmbedding
from store.services import store_item_batch_delete, store_item_update_value, store_items_delete

VALUE_NOT_OBJECT = "The value must be a JSON object."


class StoreItemAdminForm(forms.ModelForm):
    class Meta:
        model = StoreItem
        fields = ["value"]

    def clean_value(self):
        value = self.cleaned_data["value"]
        if not isinstance(value, dict):
            raise forms.ValidationError(VALUE_NOT_OBJECT)
        return value


@admin.register(StoreItem)
class StoreItemAdmin(WorkspaceScopedAdmin):
    form = StoreItemAdminForm
    list_display = ["namespace_path", "key", "workspace", "agent", "memory_user", "expires_at", "updated_at"]
    list_filter = ["workspace", "agent", "updated_at"]
    list_select_related = ["workspace", "agent", "memory_user"]
    search_fields = ["=id", "namespace_path", "key", "search_text"]
    show_full_result_count = False
    date_hierarchy = "updated_at"
    fields = [
        "id",
        "workspace",
        "agent",
        "memory_user",
        "namespace",
        "key",
        "value",
        "index_fields",
        "search_text",
        "embedding_model",
        "ttl_minutes",
        "expires_at",
        "created_at",
        "updated_at",
        "audit_history",
    ]
    readonly_fields = [name for name in fields if name != "value"]
    actions = ["delete_items"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("search_vector")

    @admin.display(description="audit history")
    def audit_history(self, obj):
        return audit_history_html(entity_type="store_item", obj=obj)

    def has_add_permission(self, request):
        # Items are written by agents through the API, which checks namespaces and indexes them.
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        # The stock action would skip the audit trail of store_items_delete.
        actions.pop("delete_selected", None)
        return actions

    def save_model(self, request, obj, form, change):
        original = StoreItem.objects.select_related("workspace", "agent", "memory_user").get(pk=obj.pk)
        store_item_update_value(item=original, value=form.cleaned_data["value"], actor=admin_actor(request))

    def delete_model(self, request, obj):
        store_items_delete(ids=[obj.pk], actor=admin_actor(request))

    def delete_queryset(self, request, queryset):
        batch_delete_by_workspace(request, queryset, store_item_batch_delete)

    @admin.action(description="Delete selected store items (audited)")
    def delete_items(self, request, queryset):
        counts = batch_delete_by_workspace(request, queryset, store_item_batch_delete)
        self.message_user(request, f"Deleted {counts.get('deleted', 0)} store item(s).", messages.SUCCESS)


@admin.register(StoreItemEmbedding)
class StoreItemEmbeddingAdmin(VectorAdmin):
    list_display = ["item", "model", "dimensions", "workspace", "created_at"]
    list_select_related = ["item", "workspace"]
    search_fields = ["=item__id"]
