from django.contrib import admin

from core.lib.admin import WorkspaceScopedAdmin
from reflection.models import ReflectionProfile, ReflectionRun


@admin.register(ReflectionRun)
class ReflectionRunAdmin(WorkspaceScopedAdmin):
    """Read-only: runs are started by beat, the API or /memories, and written by the service."""

    list_display = [
        "agent",
        "workspace",
        "state",
        "method",
        "progress_done",
        "progress_total",
        "merged",
        "retired",
        "profiles_refreshed",
        "tokens_used",
        "created_at",
    ]
    list_filter = ["state", "method", "workspace"]
    list_select_related = ["agent", "workspace"]
    readonly_fields = [f.name for f in ReflectionRun._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ReflectionProfile)
class ReflectionProfileAdmin(WorkspaceScopedAdmin):
    list_display = ["memory_user", "agent", "workspace", "method", "refreshed_at"]
    list_filter = ["method", "workspace"]
    list_select_related = ["agent", "workspace", "memory_user"]
    readonly_fields = [f.name for f in ReflectionProfile._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
