"""Workspace administration from the browser, over core's membership and API key services.

The rules that only matter to people managing a workspace by hand live here: a workspace
always keeps at least one admin, and adding an existing operator never touches their password.
"""

from django.db import transaction

from core.errors import ApplicationError
from core.models import Membership, Workspace
from core.services import audit_record, membership_remove, membership_set, operator_create

LAST_ADMIN = "A workspace needs at least one admin: promote someone else first."
# One answer whether the username is unknown or belongs to an operator (of any workspace):
# two would tell a workspace admin which usernames other workspaces use.
MEMBER_ADD_REFUSED = (
    "This cannot be done with this username. To add an operator who has an account, leave the "
    "password blank; to create an account, give a password and a username no one uses."
)
ALREADY_MEMBER = "This operator is already a member; change their role in the list."


def _other_admins(membership: Membership) -> bool:
    return (
        Membership.objects.filter(workspace_id=membership.workspace_id, role=Membership.Role.ADMIN)
        .exclude(pk=membership.pk)
        .exists()
    )


def member_add(*, workspace: Workspace, actor: str, username: str, role: str, password: str = "", email=""):
    """Add an existing operator, or create the account when `password` is given and none exists."""
    from browser.selectors import operator_by_username

    user = operator_by_username(username=username)
    if (user is not None) == bool(password):
        raise ApplicationError(MEMBER_ADD_REFUSED, fields={"username": [MEMBER_ADD_REFUSED]})
    with transaction.atomic():
        if user is None:
            membership = operator_create(
                workspace=workspace, username=username, password=password, role=role, email=email
            )
        else:
            if Membership.objects.filter(workspace=workspace, user=user).exists():
                raise ApplicationError(ALREADY_MEMBER, fields={"username": [ALREADY_MEMBER]})
            membership = membership_set(workspace=workspace, user=user, role=role)
        audit_record(
            workspace=workspace,
            actor=actor,
            action="create",
            entity_type="membership",
            entity_id=membership.pk,
            changes={"username": username, "role": role},
        )
    return membership


def member_role_change(*, membership: Membership, actor: str, role: str) -> Membership:
    with transaction.atomic():
        # Locks the workspace's admins so two demotions racing cannot both pass the check.
        list(
            Membership.objects.select_for_update().filter(
                workspace_id=membership.workspace_id, role=Membership.Role.ADMIN
            )
        )
        demoted = membership.role == Membership.Role.ADMIN and role != Membership.Role.ADMIN
        if demoted and not _other_admins(membership):
            raise ApplicationError(LAST_ADMIN, code="last_admin", fields={"role": [LAST_ADMIN]})
        old = membership.role
        membership = membership_set(workspace=membership.workspace, user=membership.user, role=role)
        audit_record(
            workspace=membership.workspace,
            actor=actor,
            action="update",
            entity_type="membership",
            entity_id=membership.pk,
            changes={"role": [old, role]},
        )
    return membership


def member_remove(*, membership: Membership, actor: str) -> None:
    with transaction.atomic():
        list(
            Membership.objects.select_for_update().filter(
                workspace_id=membership.workspace_id, role=Membership.Role.ADMIN
            )
        )
        if membership.role == Membership.Role.ADMIN and not _other_admins(membership):
            raise ApplicationError(LAST_ADMIN, code="last_admin")
        audit_record(
            workspace=membership.workspace,
            actor=actor,
            action="delete",
            entity_type="membership",
            entity_id=membership.pk,
            changes={"username": membership.user.get_username(), "role": membership.role},
        )
        membership_remove(membership=membership)
