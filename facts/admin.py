from django.contrib import admin, messages

from core.lib.admin import (
    WorkspaceScopedAdmin,
    WorkspaceScopedInline,
    admin_actor,
    audit_history_html,
    batch_delete_by_workspace,
)
from facts.models import Fact, FactKey
from facts.services import fact_batch_delete, fact_update


class FactVersionInline(WorkspaceScopedInline, admin.TabularInline):
    """The versions this one superseded (read-only history)."""

    model = Fact
    fk_name = "superseded_by"
    verbose_name = "superseded version"
    fields = [
        "value",
        "confidence",
        "times_confirmed",
        "times_contradicted",
        "valid_from",
        "valid_to",
        "source",
    ]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Fact)
class FactAdmin(WorkspaceScopedAdmin):
    list_display = [
        "key",
        "short_value",
        "scope",
        "fact_type",
        "confidence",
        "times_confirmed",
        "times_contradicted",
        "is_current",
        "agent",
        "memory_user",
        "workspace",
        "valid_from",
    ]
    list_filter = ["scope", "fact_type", "source", ("valid_to", admin.EmptyFieldListFilter), "workspace"]
    list_select_related = ["workspace", "agent", "memory_user"]
    search_fields = ["key", "key_normalized", "search_text"]
    show_full_result_count = False
    # Edits go through fact_update: a new value supersedes, metadata changes in place.
    fields = [
        "workspace",
        "key",
        "scope",
        "agent",
        "memory_user",
        "thread",
        "value",
        "fact_type",
        "confidence",
        "evidence",
        "times_confirmed",
        "times_contradicted",
        "source",
        "source_message",
        "source_episode",
        "valid_from",
        "valid_to",
        "superseded_by",
        "access_count",
        "last_accessed_at",
        "created_by",
        "audit_history",
    ]
    readonly_fields = [
        "workspace",
        "key",
        "scope",
        "agent",
        "memory_user",
        "thread",
        "times_confirmed",
        "times_contradicted",
        "source",
        "source_message",
        "source_episode",
        "valid_from",
        "valid_to",
        "superseded_by",
        "access_count",
        "last_accessed_at",
        "created_by",
        "audit_history",
    ]
    inlines = [FactVersionInline]

    @admin.display(description="value")
    def short_value(self, obj):
        text = str(obj.value)
        return text if len(text) <= 60 else f"{text[:57]}..."

    @admin.display(boolean=True, description="current")
    def is_current(self, obj):
        return obj.valid_to is None

    @admin.display(description="audit history")
    def audit_history(self, obj):
        return audit_history_html(entity_type="fact", obj=obj)

    def has_add_permission(self, request):
        # Facts are remembered through the API or the /memories browser (fact_remember).
        return False

    def save_model(self, request, obj, form, change):
        original = Fact.objects.get(pk=obj.pk)
        changed = set(form.changed_data)
        new = fact_update(
            fact=original,
            actor=admin_actor(request),
            value=obj.value if "value" in changed else None,
            fact_type=obj.fact_type if "fact_type" in changed else None,
            confidence=obj.confidence if "confidence" in changed else None,
            evidence=obj.evidence if "evidence" in changed else None,
        )
        if new.pk != original.pk:
            # This page stays on the closed version; the new one is its `superseded_by`.
            messages.info(request, f"The new value was saved as a new version ({new.pk}).")

    def delete_model(self, request, obj):
        self.delete_queryset(request, Fact.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        counts = batch_delete_by_workspace(request, queryset, fact_batch_delete)
        messages.success(request, f"Deleted: {counts}.")


@admin.register(FactKey)
class FactKeyAdmin(WorkspaceScopedAdmin):
    """The key dictionary is derived data: browsable, never edited."""

    list_display = ["key_normalized", "workspace"]
    list_filter = ["workspace"]
    list_select_related = ["workspace"]
    search_fields = ["key_normalized"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
