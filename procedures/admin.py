from django.contrib import admin, messages

from core.lib.admin import WorkspaceScopedAdmin, admin_actor, audit_history_html, batch_delete_by_workspace
from procedures.models import Procedure
from procedures.services import (
    PROCEDURE_EDITABLE,
    procedure_batch_delete,
    procedure_create,
    procedure_update,
)


@admin.register(Procedure)
class ProcedureAdmin(WorkspaceScopedAdmin):
    list_display = [
        "name",
        "version",
        "procedure_type",
        "origin",
        "agent",
        "workspace",
        "is_active",
        "times_used",
        "success_count",
        "failure_count",
        "last_used_at",
    ]
    list_filter = ["procedure_type", "origin", "is_active", "workspace"]
    list_select_related = ["workspace", "agent"]
    search_fields = ["name", "description"]
    autocomplete_fields = []
    raw_id_fields = ["parent"]
    readonly_fields = [
        "version",
        "times_used",
        "success_count",
        "failure_count",
        "total_duration_ms",
        "timed_runs",
        "last_used_at",
        "source_episode_ids",
        "created_by",
        "created_at",
        "audit_history",
    ]
    actions = ["deactivate"]

    @admin.display(description="audit history")
    def audit_history(self, obj):
        return audit_history_html(entity_type="procedure", obj=obj)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        return [*self.readonly_fields, "workspace", "agent", "origin", "parent"]

    def save_model(self, request, obj, form, change):
        if change:
            original = Procedure.objects.get(pk=obj.pk)
            fields = {name: getattr(obj, name) for name in PROCEDURE_EDITABLE if name in form.changed_data}
            procedure_update(procedure=original, actor=admin_actor(request), **fields)
            return
        created = procedure_create(
            workspace=obj.workspace,
            agent=obj.agent,
            name=obj.name,
            description=obj.description,
            trigger_conditions=obj.trigger_conditions,
            procedure_type=obj.procedure_type,
            content=obj.content,
            origin=obj.origin,
            parent=obj.parent,
            actor=admin_actor(request),
        )
        obj.pk = created.pk
        obj._state.adding = False

    def delete_model(self, request, obj):
        self.delete_queryset(request, Procedure.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        counts = batch_delete_by_workspace(request, queryset, procedure_batch_delete)
        messages.success(request, f"Deleted: {counts}.")

    @admin.action(description="Deactivate the selected procedures (they stop matching)")
    def deactivate(self, request, queryset):
        for procedure in queryset:
            procedure_update(procedure=procedure, actor=admin_actor(request), is_active=False)
        messages.success(request, f"Deactivated {queryset.count()} procedure(s).")
