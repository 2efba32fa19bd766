from django.contrib import admin

from core.lib.admin import WorkspaceScopedAdmin
from retention.models import RetentionRule, RetentionRun


@admin.register(RetentionRule)
class RetentionRuleAdmin(WorkspaceScopedAdmin):
    list_display = ("tier", "agent", "max_age_days", "keep_latest", "changed_by", "updated_at")
    list_filter = ("tier",)
    autocomplete_fields = ("agent",)


@admin.register(RetentionRun)
class RetentionRunAdmin(WorkspaceScopedAdmin):
    list_display = ("id", "state", "trigger", "started_at", "finished_at", "deleted")
    list_filter = ("state",)
    readonly_fields = ("state", "trigger", "started_at", "heartbeat_at", "finished_at", "deleted", "error")

    # Runs are records of the engine: started by the schedule or the API, never by hand.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
