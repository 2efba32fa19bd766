from django.contrib import admin, messages
from django.db.models import Count

from checkpoints.models import Checkpoint, CheckpointWrite
from checkpoints.services import checkpoints_delete
from core.lib.admin import WorkspaceScopedAdmin, WorkspaceScopedInline, admin_actor


class CheckpointWriteInline(WorkspaceScopedInline, admin.TabularInline):
    model = CheckpointWrite
    extra = 0
    fields = ["task_id", "task_path", "idx", "channel", "type", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Checkpoint)
class CheckpointAdmin(WorkspaceScopedAdmin):
    list_display = [
        "checkpoint_id",
        "checkpoint_ns",
        "thread",
        "workspace",
        "parent_checkpoint_id",
        "type",
        "write_count",
        "created_at",
    ]
    list_filter = ["type", "workspace", "created_at"]
    list_select_related = ["thread", "workspace"]
    search_fields = ["checkpoint_id", "=thread__id", "parent_checkpoint_id"]
    show_full_result_count = False
    inlines = [CheckpointWriteInline]
    exclude = ["data"]
    actions = ["delete_with_writes"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("data").annotate(write_count=Count("writes"))

    @admin.display(description="Pending writes", ordering="write_count")
    def write_count(self, obj):
        return obj.write_count

    # Checkpoints are serialized agent state: shown, never edited by hand.
    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name != "data"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def delete_model(self, request, obj):
        checkpoints_delete(ids=[obj.pk], actor=admin_actor(request))

    def delete_queryset(self, request, queryset):
        checkpoints_delete(ids=list(queryset.values_list("pk", flat=True)), actor=admin_actor(request))

    @admin.action(description="Delete the selected checkpoints with their pending writes")
    def delete_with_writes(self, request, queryset):
        counts = checkpoints_delete(
            ids=list(queryset.values_list("pk", flat=True)), actor=admin_actor(request)
        )
        messages.success(
            request, f"Deleted {counts['deleted']} checkpoint(s) and {counts['writes']} write(s)."
        )
