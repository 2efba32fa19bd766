from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from core.access import Principal
from core.models import AuditEvent, Membership
from facts.models import Fact, FactKey
from facts.services import fact_batch_delete, fact_update

# Rows of audit history shown on a change page; the full trail is in the AuditEvent admin.
AUDIT_ROWS = 20


def admin_actor(request) -> str:
    return f"admin:{request.user.get_username()}"


def admin_principal(request, workspace) -> Principal:
    """A workspace-admin principal for an operator acting through the Django admin."""
    return Principal(workspace=workspace, role=Membership.Role.ADMIN, user=request.user)


def audit_history_html(*, entity_type: str, obj) -> str:
    """The object's recent audit events as a read-only table."""
    if obj is None or obj.pk is None:
        return "-"
    events = AuditEvent.objects.filter(
        workspace_id=obj.workspace_id, entity_type=entity_type, entity_id=str(obj.pk)
    ).order_by("-at")[:AUDIT_ROWS]
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
        ((e.at.strftime("%Y-%m-%d %H:%M:%S"), e.action, e.actor, e.changes) for e in events),
    )
    return format_html(
        "<table><tr><th>at</th><th>action</th><th>actor</th><th>changes</th></tr>{}</table>", rows
    )


def batch_delete_by_workspace(request, queryset, service) -> dict:
    """Run an `<entity>_batch_delete` service once per workspace of the selection, so the
    admin deletes through the same code (cascades, audit) as the API."""
    totals: dict[str, int] = {}
    by_workspace: dict = {}
    for pk, workspace_id in queryset.values_list("pk", "workspace_id"):
        by_workspace.setdefault(workspace_id, []).append(pk)
    from core.models import Workspace

    for workspace in Workspace.objects.filter(pk__in=by_workspace):
        counts = service(
            principal=admin_principal(request, workspace),
            ids=by_workspace[workspace.pk],
            actor=admin_actor(request),
        )
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count
    return totals


class FactVersionInline(admin.TabularInline):
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
class FactAdmin(admin.ModelAdmin):
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
class FactKeyAdmin(admin.ModelAdmin):
    """The key dictionary is derived data: browsable, never edited."""

    list_display = ["key_normalized", "workspace"]
    list_filter = ["workspace"]
    list_select_related = ["workspace"]
    search_fields = ["key_normalized"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
