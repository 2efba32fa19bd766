"""Helpers every tier's admin shares: the acting operator, audit history, batch deletes by
workspace, and the read-only admin of vector tables."""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from core.access import Principal
from core.models import AuditEvent, Membership, Workspace

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
    for workspace in Workspace.objects.filter(pk__in=by_workspace):
        counts = service(
            principal=admin_principal(request, workspace),
            ids=by_workspace[workspace.pk],
            actor=admin_actor(request),
        )
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count
    return totals


class VectorAdmin(admin.ModelAdmin):
    """Read-only, vectors never shown: the embedding tasks write these rows, and a vector in
    a change page is noise to a person and a leak of what it encodes."""

    list_filter = ["model", "dimensions"]
    exclude = ["embedding"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
