"""Reads the browser needs that no tier exposes: the operator's memberships and user lookup."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.http import Http404

from core.access import Principal, principal_for_membership
from core.models import Membership, Workspace


@dataclass(frozen=True)
class OperatorContext:
    """The operator's view of one workspace: the principal and every workspace for the switcher."""

    principal: Principal
    membership: Membership
    workspaces: list[Workspace]

    @property
    def workspace(self) -> Workspace:
        return self.principal.workspace


def operator_workspaces(*, user) -> list[tuple[Workspace, str]]:
    """Every workspace the operator may open, with their role, in one query.

    Superusers may open every workspace as admins, members or not.
    """
    if user.is_superuser:
        roles = dict(Membership.objects.filter(user=user).values_list("workspace_id", "role"))
        return [(ws, roles.get(ws.pk, Membership.Role.ADMIN)) for ws in Workspace.objects.order_by("name")]
    memberships = Membership.objects.filter(user=user).select_related("workspace").order_by("workspace__name")
    return [(m.workspace, m.role) for m in memberships]


def operator_context(*, user, workspace_id) -> OperatorContext:
    """The operator's principal in `workspace_id`; a workspace they do not belong to is a 404."""
    if user.is_superuser:
        workspaces = list(Workspace.objects.order_by("name"))
        workspace = next((ws for ws in workspaces if ws.pk == workspace_id), None)
        if workspace is None:
            raise Http404("No such workspace.")
        # An unsaved membership: superusers administer every workspace without joining it.
        membership = Membership(workspace=workspace, user=user, role=Membership.Role.ADMIN)
        return OperatorContext(principal_for_membership(membership), membership, workspaces)
    memberships = list(
        Membership.objects.filter(user=user).select_related("workspace", "user").order_by("workspace__name")
    )
    membership = next((m for m in memberships if m.workspace_id == workspace_id), None)
    if membership is None:
        raise Http404("No such workspace.")
    return OperatorContext(
        principal_for_membership(membership), membership, [m.workspace for m in memberships]
    )


def operator_by_username(*, username: str):
    return get_user_model().objects.filter(username=username).first()


def member_get(*, workspace: Workspace, membership_id) -> Membership:
    membership = (
        Membership.objects.select_related("user", "workspace")
        .filter(workspace=workspace, pk=membership_id)
        .first()
    )
    if membership is None:
        raise Http404("No such member.")
    return membership


def api_key_get(*, workspace: Workspace, api_key_id):
    from core.models import ApiKey

    api_key = ApiKey.objects.filter(workspace=workspace, pk=api_key_id).first()
    if api_key is None:
        raise Http404("No such API key.")
    return api_key
