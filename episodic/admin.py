"""Admin for episodic entries and their vectors.

Vectors are never shown: the embedding tables list their model and dimension only.
"""

from django.contrib import admin, messages

from core.lib.admin import VectorAdmin, WorkspaceScopedAdmin, admin_actor
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entries_delete, entry_update


@admin.register(EpisodicEntry)
class EpisodicEntryAdmin(WorkspaceScopedAdmin):
    list_display = [
        "__str__",
        "workspace",
        "agent",
        "memory_user",
        "source",
        "status",
        "embedding_model",
        "created_at",
    ]
    list_filter = ["status", "source", "workspace", "embedding_model", "created_at"]
    list_select_related = ["workspace", "agent", "memory_user"]
    search_fields = ["=id", "content", "evidence", "content_hash"]
    date_hierarchy = "created_at"
    raw_id_fields = ["memory_user", "source_thread"]
    fields = [
        "id",
        "workspace",
        "agent",
        "memory_user",
        "content",
        "status",
        "source",
        "evidence",
        "source_thread",
        "source_message_ids",
        "metadata",
        "content_hash",
        "embedding_model",
        "created_at",
        "updated_at",
        "audit_history",
    ]
    readonly_fields = [
        "id",
        "workspace",
        "agent",
        "memory_user",
        "source",
        "evidence",
        "source_thread",
        "source_message_ids",
        "content_hash",
        "embedding_model",
        "created_at",
        "updated_at",
        "audit_history",
    ]
    actions = ["delete_entries", "mark_superseded"]

    @admin.display(description="audit history")
    def audit_history(self, obj):
        from core.lib.admin import audit_history_html

        return audit_history_html(entity_type="episodic_entry", obj=obj)

    def has_add_permission(self, request):
        # Entries come from extraction, which validates evidence; the admin only curates.
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        # The stock action would skip the audit trail of entries_delete.
        actions.pop("delete_selected", None)
        return actions

    def save_model(self, request, obj, form, change):
        original = EpisodicEntry.objects.get(pk=obj.pk)
        entry_update(
            entry=original,
            actor=admin_actor(request),
            content=form.cleaned_data.get("content"),
            status=form.cleaned_data.get("status"),
            metadata=form.cleaned_data.get("metadata"),
        )

    def delete_model(self, request, obj):
        entries_delete(
            queryset=EpisodicEntry.objects.filter(pk=obj.pk),
            workspace=obj.workspace,
            actor=admin_actor(request),
        )

    def delete_queryset(self, request, queryset):
        self.delete_entries(request, queryset)

    @admin.action(description="Delete selected entries (audited)")
    def delete_entries(self, request, queryset):
        total = 0
        for workspace_id in set(queryset.values_list("workspace_id", flat=True)):
            scoped = queryset.filter(workspace_id=workspace_id)
            workspace = scoped.first().workspace
            total += len(entries_delete(queryset=scoped, workspace=workspace, actor=admin_actor(request)))
        self.message_user(request, f"Deleted {total} entries.", messages.SUCCESS)

    @admin.action(description="Mark selected entries superseded")
    def mark_superseded(self, request, queryset):
        count = 0
        for entry in queryset.select_related("workspace"):
            entry_update(entry=entry, actor=admin_actor(request), status=EpisodicEntry.Status.SUPERSEDED)
            count += 1
        self.message_user(request, f"Marked {count} entries superseded.", messages.SUCCESS)


@admin.register(EntryEmbedding)
class EntryEmbeddingAdmin(VectorAdmin):
    list_display = ["entry", "model", "dimensions", "workspace", "created_at"]
    list_select_related = ["entry", "workspace"]
    search_fields = ["=entry__id"]
