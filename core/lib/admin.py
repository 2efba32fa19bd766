"""Helpers every tier's admin shares: workspace scoping for staff who administer some
workspaces, the acting operator, audit history, batch deletes by workspace, and the read-only
admin of vector tables.

Who sees what in /admin/:

- a superuser: everything, as Django's admin always did;
- a staff user: the rows of the workspaces where their membership role is admin, and only
  those; what they may do there comes from those memberships, not from Django model
  permissions (none need handing out). Staff whose memberships are all viewer or editor
  see an empty index: /memories is their tool;
- operators, groups and worker heartbeats are not workspace data: superusers only.

Every ModelAdmin registered on the site is a `WorkspaceScopedAdmin` or a
`SuperuserOnlyAdmin` (core/tests/admin checks the registry).
"""

from django.contrib import admin
from django.contrib.admin import widgets
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.exceptions import FieldDoesNotExist, PermissionDenied, ValidationError
from django.http import Http404
from django.utils.html import format_html, format_html_join

from core.access import Principal
from core.models import AuditEvent, Membership, Workspace

# Rows of audit history shown on a change page; the full trail is in the AuditEvent admin.
AUDIT_ROWS = 20

WORKSPACE_NOT_ALLOWED = "The row would belong to a workspace you do not administer."


def admin_actor(request) -> str:
    return f"admin:{request.user.get_username()}"


def admin_principal(request, workspace) -> Principal:
    """A workspace-admin principal for an operator acting through the Django admin."""
    return Principal(workspace=workspace, role=Membership.Role.ADMIN, user=request.user)


def admin_workspace_ids(request) -> frozenset | None:
    """The workspaces the request's user administers in /admin/; None means all (a superuser).

    Read once per request: every changelist, form field and permission check asks.
    """
    user = request.user
    if user.is_superuser:
        return None
    ids = getattr(request, "_admin_workspace_ids", None)
    if ids is None:
        ids = frozenset()
        if user.is_active and user.is_staff:
            ids = frozenset(
                Membership.objects.filter(user=user, role=Membership.Role.ADMIN).values_list(
                    "workspace_id", flat=True
                )
            )
        request._admin_workspace_ids = ids
    return ids


def workspace_lookup(model) -> str | None:
    """The lookup from `model` to its workspace: "pk" for Workspace, "workspace" for a model
    with that foreign key, None when the model holds no workspace data by itself."""
    if model is Workspace:
        return "pk"
    try:
        field = model._meta.get_field("workspace")
    except FieldDoesNotExist:
        return None
    if field.many_to_one and field.related_model is Workspace:
        return "workspace"
    return None


def workspace_id_of(obj, lookup: str):
    """The workspace id of `obj` following `lookup` ("workspace", "thread__workspace", "pk")."""
    if lookup == "pk":
        return obj.pk
    *hops, last = lookup.split("__")
    for hop in hops:
        obj = getattr(obj, hop, None)
        if obj is None:
            return None
    return getattr(obj, obj._meta.get_field(last).attname)


def workspace_scope(request, queryset, lookup: str | None):
    """`queryset` limited to the workspaces the request's user administers.

    Operators (the auth user model) are scoped to the members of those workspaces. A model
    with no lookup is empty for everyone but superusers: an unknown shape never leaks.
    """
    ids = admin_workspace_ids(request)
    if ids is None:
        return queryset
    if queryset.model is get_user_model():
        # A subquery, not a join: an operator in two of the workspaces is listed once.
        members = Membership.objects.filter(workspace_id__in=ids).values("user_id")
        return queryset.filter(pk__in=members)
    if lookup is None:
        return queryset.none()
    return queryset.filter(**{f"{lookup}__in": ids})


def related_lookup(admin_site, model) -> str | None:
    """The workspace lookup of a related model: its admin's declaration, else its own field."""
    model_admin = admin_site._registry.get(model)
    if isinstance(model_admin, WorkspaceScopedMixin):
        return model_admin.get_workspace_lookup()
    return workspace_lookup(model)


class ScopedRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A relation filter offering only the related rows of the user's workspaces (the stock
    one lists every workspace's names)."""

    def field_choices(self, field, request, model_admin):
        ordering = self.field_admin_ordering(field, request, model_admin)
        related = field.related_model
        allowed = workspace_scope(
            request, related._default_manager.all(), related_lookup(model_admin.admin_site, related)
        )
        return field.get_choices(
            include_blank=False, ordering=ordering, limit_choices_to={"pk__in": allowed.values("pk")}
        )


class ScopedForeignKeyRawIdWidget(widgets.ForeignKeyRawIdWidget):
    """A raw id input that names only rows the user may see: the stock widget prints the
    label of any row whose id is typed in."""

    def __init__(self, rel, admin_site, *, queryset, **kwargs):
        self.queryset = queryset
        super().__init__(rel, admin_site, **kwargs)

    def label_and_url_for_value(self, value):
        key = self.rel.get_related_field().name
        try:
            visible = self.queryset.filter(**{key: value}).exists()
        except (ValueError, ValidationError):
            return "", ""
        if not visible:
            return "", ""
        return super().label_and_url_for_value(value)


class WorkspaceScopedMixin:
    """Queryset and form-field scoping shared by model admins and inlines.

    `workspace_field` names the lookup from the model to its workspace when the model does
    not hold a `workspace` foreign key itself (e.g. "thread__workspace").
    """

    workspace_field: str | None = None

    def get_workspace_lookup(self) -> str | None:
        return self.workspace_field or workspace_lookup(self.model)

    def get_queryset(self, request):
        return workspace_scope(request, super().get_queryset(request), self.get_workspace_lookup())

    def in_scope(self, request, obj) -> bool:
        ids = admin_workspace_ids(request)
        if ids is None:
            return True
        if not ids:
            return False
        return obj is None or workspace_id_of(obj, self.get_workspace_lookup()) in ids

    def _scoped_choices(self, db_field, request, kwargs):
        db = kwargs.get("using")
        queryset = kwargs.get("queryset")
        if queryset is None:
            queryset = self.get_field_queryset(db, db_field, request)
        if queryset is None:
            queryset = db_field.remote_field.model._default_manager.using(db).all()
        return workspace_scope(request, queryset, related_lookup(self.admin_site, db_field.related_model))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if admin_workspace_ids(request) is not None:
            kwargs["queryset"] = self._scoped_choices(db_field, request, kwargs)
            if "widget" not in kwargs and db_field.name in self.raw_id_fields:
                kwargs["widget"] = ScopedForeignKeyRawIdWidget(
                    db_field.remote_field,
                    self.admin_site,
                    using=kwargs.get("using"),
                    queryset=kwargs["queryset"],
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if admin_workspace_ids(request) is not None:
            kwargs["queryset"] = self._scoped_choices(db_field, request, kwargs)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_autocomplete_fields(self, request):
        fields = super().get_autocomplete_fields(request)
        if admin_workspace_ids(request) is None:
            return fields
        # Autocomplete asks the related model's admin; one that is not scoped (operators)
        # answers 403, so those fields become selects limited by formfield_for_foreignkey.
        return [
            name
            for name in fields
            if isinstance(
                self.admin_site._registry.get(self.model._meta.get_field(name).related_model),
                WorkspaceScopedMixin,
            )
        ]


class WorkspaceScopedAdmin(WorkspaceScopedMixin, admin.ModelAdmin):
    """The base of every workspace-data admin: see module docstring for who sees what.

    A subclass that declares a permission (`has_change_permission` returning False for
    read-only history) keeps it; the membership rule only ever narrows.
    """

    @classmethod
    def _lookup_check(cls, model):
        lookup = cls.workspace_field or workspace_lookup(model)
        if lookup is None:
            return [
                checks.Error(
                    f"{cls.__qualname__} cannot find the workspace of {model._meta.label}.",
                    hint="Set workspace_field to the lookup that reaches it, e.g. 'thread__workspace'.",
                    obj=cls,
                    id="core.E101",
                )
            ]
        return []

    def check(self, **kwargs):
        return [*super().check(**kwargs), *self._lookup_check(self.model)]

    def has_module_permission(self, request):
        ids = admin_workspace_ids(request)
        return super().has_module_permission(request) if ids is None else bool(ids)

    def has_view_permission(self, request, obj=None):
        if admin_workspace_ids(request) is None:
            return super().has_view_permission(request, obj)
        return self.in_scope(request, obj)

    def has_add_permission(self, request):
        ids = admin_workspace_ids(request)
        return super().has_add_permission(request) if ids is None else bool(ids)

    def has_change_permission(self, request, obj=None):
        if admin_workspace_ids(request) is None:
            return super().has_change_permission(request, obj)
        return self.in_scope(request, obj)

    def has_delete_permission(self, request, obj=None):
        if admin_workspace_ids(request) is None:
            return super().has_delete_permission(request, obj)
        return self.in_scope(request, obj)

    def get_list_filter(self, request):
        filters = super().get_list_filter(request)
        if admin_workspace_ids(request) is None:
            return filters
        return [self._scoped_filter(entry) for entry in filters]

    def _scoped_filter(self, entry):
        if isinstance(entry, str):
            field = get_fields_from_path(self.model, entry)[-1]
            return (entry, ScopedRelatedFieldListFilter) if field.is_relation else entry
        stock_relation_filter = (
            isinstance(entry, tuple | list)
            and isinstance(entry[1], type)
            and issubclass(entry[1], admin.RelatedFieldListFilter)
            and not issubclass(entry[1], ScopedRelatedFieldListFilter)
        )
        return (entry[0], ScopedRelatedFieldListFilter) if stock_relation_filter else entry

    def save_form(self, request, form, change):
        obj = super().save_form(request, form, change)
        # The form's choices already hold the workspace in scope; this refuses whatever
        # reaches a save another way (a read-only field, a subclass's own form).
        if not self.in_scope(request, obj):
            raise PermissionDenied(WORKSPACE_NOT_ALLOWED)
        return obj

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        # A row of another workspace answers like a row that does not exist: 404, the same
        # as everywhere else in the service (the stock redirect names the id in a message).
        if admin_workspace_ids(request) is not None:
            raise Http404(f"No {opts.verbose_name} with that id.")
        return super()._get_obj_does_not_exist_redirect(request, opts, object_id)


class WorkspaceScopedInline(WorkspaceScopedMixin):
    """Mixin for the inlines of a scoped admin: the parent row is already in scope, so the
    membership rule decides the permissions and the inline's own declarations narrow them."""

    def has_view_permission(self, request, obj=None):
        if admin_workspace_ids(request) is None:
            return super().has_view_permission(request, obj)
        return self.in_scope(request, None) and self._parent_in_scope(request, obj)

    def has_add_permission(self, request, obj):
        if admin_workspace_ids(request) is None:
            return super().has_add_permission(request, obj)
        return self.in_scope(request, None) and self._parent_in_scope(request, obj)

    def has_change_permission(self, request, obj=None):
        if admin_workspace_ids(request) is None:
            return super().has_change_permission(request, obj)
        return self.in_scope(request, None) and self._parent_in_scope(request, obj)

    def has_delete_permission(self, request, obj=None):
        if admin_workspace_ids(request) is None:
            return super().has_delete_permission(request, obj)
        return self.in_scope(request, None) and self._parent_in_scope(request, obj)

    def _parent_in_scope(self, request, parent) -> bool:
        if parent is None:
            return True
        ids = admin_workspace_ids(request)
        return workspace_id_of(parent, related_lookup(self.admin_site, type(parent)) or "pk") in ids


class SuperuserOnlyAdmin(admin.ModelAdmin):
    """For models that are not one workspace's data (operators, groups, worker heartbeats):
    superusers only, whatever Django permissions a staff user holds."""

    def has_module_permission(self, request):
        return request.user.is_superuser and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_view_permission(request, obj)

    def has_add_permission(self, request, *args):
        return request.user.is_superuser and super().has_add_permission(request, *args)

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)


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
    admin deletes through the same code (cascades, audit) as the API.

    The selection comes from a scoped changelist; a workspace the user does not administer
    is refused all the same, before anything is deleted.
    """
    totals: dict[str, int] = {}
    by_workspace: dict = {}
    for pk, workspace_id in queryset.values_list("pk", "workspace_id"):
        by_workspace.setdefault(workspace_id, []).append(pk)
    allowed = admin_workspace_ids(request)
    if allowed is not None and not set(by_workspace) <= allowed:
        raise PermissionDenied(WORKSPACE_NOT_ALLOWED)
    for workspace in Workspace.objects.filter(pk__in=by_workspace):
        counts = service(
            principal=admin_principal(request, workspace),
            ids=by_workspace[workspace.pk],
            actor=admin_actor(request),
        )
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count
    return totals


class VectorAdmin(WorkspaceScopedAdmin):
    """Read-only, vectors never shown: the embedding tasks write these rows, and a vector in
    a change page is noise to a person and a leak of what it encodes."""

    list_filter = ["model", "dimensions"]
    exclude = ["embedding"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
