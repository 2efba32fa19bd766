from django.contrib import admin, messages

from core.lib.admin import WorkspaceScopedAdmin, admin_actor, audit_history_html, batch_delete_by_workspace
from episodes.models import Episode
from episodes.services import episode_batch_delete, episode_feedback


@admin.register(Episode)
class EpisodeAdmin(WorkspaceScopedAdmin):
    list_display = [
        "__str__",
        "agent",
        "memory_user",
        "workspace",
        "outcome",
        "duration_ms",
        "rating",
        "started_at",
        "ended_at",
    ]
    list_filter = ["outcome", "rating", "trigger_type", "workspace"]
    list_select_related = ["workspace", "agent", "memory_user"]
    search_fields = ["trigger_type", "error", "feedback_comment"]
    show_full_result_count = False
    # The record of a run is not rewritten here; only the human feedback is editable.
    readonly_fields = [
        "workspace",
        "agent",
        "memory_user",
        "thread",
        "trigger_type",
        "trigger_payload",
        "input",
        "messages",
        "actions",
        "outcome",
        "final_output",
        "error",
        "started_at",
        "ended_at",
        "duration_ms",
        "audit_history",
    ]
    fields = [*readonly_fields[:-1], "rating", "feedback_comment", "audit_history"]

    @admin.display(description="audit history")
    def audit_history(self, obj):
        return audit_history_html(entity_type="episode", obj=obj)

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        episode_feedback(
            episode=Episode.objects.get(pk=obj.pk),
            rating=obj.rating,
            comment=obj.feedback_comment,
            actor=admin_actor(request),
        )

    def delete_model(self, request, obj):
        self.delete_queryset(request, Episode.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        counts = batch_delete_by_workspace(request, queryset, episode_batch_delete)
        messages.success(request, f"Deleted: {counts}.")
