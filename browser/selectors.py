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


def checkpoint_get_by_id(*, principal, checkpoint_pk):
    """One checkpoint by primary key within the principal's scope, with its pending writes."""
    from checkpoints.selectors import checkpoint_scoped_queryset
    from core.errors import NotFoundError

    checkpoint = (
        checkpoint_scoped_queryset(principal=principal)
        .select_related("thread", "thread__agent")
        .prefetch_related("writes")
        .filter(pk=checkpoint_pk)
        .first()
    )
    if checkpoint is None:
        raise NotFoundError("Checkpoint not found.")
    return checkpoint


@dataclass(frozen=True)
class TreeRow:
    message: object
    # 0 on the first-written path; +1 for each regeneration (a later sibling) on the way here.
    branch: int
    is_branch_start: bool
    in_window: bool


# The thread page shows the newest messages only; a 100,000-message thread stays one page.
THREAD_TREE_LIMIT = 300


def thread_message_tree(*, thread, window_ids) -> tuple[list[TreeRow], int]:
    """The newest messages of a thread in write order, each with its branch level.

    A message that is not the first child of its parent starts a branch (a regenerated
    answer or an edited question). Returns the rows and the number of older messages left out.
    """
    from threads.models import Message

    total = thread.message_count
    newest = list(
        Message.objects.filter(thread=thread)
        .order_by("-seq")
        .only("id", "role", "content", "parent_id", "seq", "created_at", "token_count", "node_id", "name")[
            :THREAD_TREE_LIMIT
        ]
    )
    newest.reverse()
    first_child: dict = {}
    for message in newest:
        first_child.setdefault(message.parent_id, message.pk)
    branch_of: dict = {}
    window = {str(pk) for pk in window_ids}
    rows = []
    for message in newest:
        starts = message.parent_id is not None and first_child.get(message.parent_id) != message.pk
        level = branch_of.get(message.parent_id, 0) + (1 if starts else 0)
        branch_of[message.pk] = level
        rows.append(TreeRow(message, level, starts, str(message.pk) in window))
    return rows, max(total - len(newest), 0)
