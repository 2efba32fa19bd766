"""Reads the browser needs that no tier exposes: memberships, checkpoints by id, and what the
filter pickers suggest and resolve. Pages with reads of their own keep them in a module of this
package named after the page (the thread page's, `threads`, is re-exported here)."""

import uuid
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.http import Http404

from browser.selectors.threads import (
    THREAD_TREE_LIMIT,
    TOOL_ARGUMENTS_CHARS,
    BranchPage,
    Fork,
    ToolCall,
    TreeRow,
    thread_branch_leaf,
    thread_message_tree,
    thread_nodes,
    thread_tool_result,
    tool_arguments_display,
)
from core.access import Principal, principal_for_membership
from core.models import Membership, Workspace

# The thread page's reads live in browser.selectors.threads; these names stay importable here.
__all__ = [
    "THREAD_TREE_LIMIT",
    "TOOL_ARGUMENTS_CHARS",
    "BranchPage",
    "Fork",
    "ToolCall",
    "TreeRow",
    "thread_branch_leaf",
    "thread_message_tree",
    "thread_nodes",
    "thread_tool_result",
    "tool_arguments_display",
]


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


# ---------------------------------------------------------------------------------------------
# Pickers: who or which thread a filter means, from what an operator types


@dataclass(frozen=True)
class Suggestion:
    id: object
    label: str  # what the operator recognises: a name or a title
    detail: str  # what tells two of them apart: canonical id, agent, last activity


# A picker lists this many matches; more means "type more".
PICKER_LIMIT = 8
# Nobody types a name this long; a longer query is cut, never refused.
PICKER_QUERY_CHARS = 200


def picker_query(text) -> str:
    """`text` as a search term: trimmed, cut, without NUL (which PostgreSQL refuses in text)."""
    return str(text or "").replace("\x00", "").strip()[:PICKER_QUERY_CHARS]


def _as_uuid(text: str):
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _user_suggestion(user) -> Suggestion:
    return Suggestion(user.pk, user.display_name or user.canonical_id, user.canonical_id)


def _thread_suggestion(thread) -> Suggestion:
    detail = thread.agent.slug
    if thread.memory_user_id:
        detail += f" · {thread.memory_user}"
    return Suggestion(thread.pk, thread.title or "Untitled thread", detail)


def _memory_users(principal, query: str):
    """Active memory users of the principal's scope matching `query`, exact matches first."""
    from django.db.models import Case, Exists, IntegerField, OuterRef, Q, Value, When

    from identities.models import ChannelIdentity
    from identities.selectors import memory_user_scope

    users = memory_user_scope(principal).filter(merged_into__isnull=True)
    pk = _as_uuid(query)
    if pk is not None:
        return users.filter(pk=pk)
    if not query:
        return users.order_by("-last_seen_at", "pk")
    identities = ChannelIdentity.objects.filter(memory_user=OuterRef("pk"))
    exact = (
        Q(canonical_id=query) | Q(display_name__iexact=query) | Exists(identities.filter(external_id=query))
    )
    return (
        users.filter(
            exact
            | Q(display_name__icontains=query)
            | Q(canonical_id__icontains=query)
            | Exists(identities.filter(external_id__icontains=query))
        )
        .annotate(exact=Case(When(exact, then=Value(0)), default=Value(1), output_field=IntegerField()))
        .order_by("exact", "-last_seen_at", "pk")
    )


def _threads(principal, query: str):
    from django.db.models import Case, IntegerField, Value, When

    from threads.selectors import thread_scoped_queryset

    threads = thread_scoped_queryset(principal=principal).select_related("agent", "memory_user")
    pk = _as_uuid(query)
    if pk is not None:
        return threads.filter(pk=pk)
    if not query:
        return threads.order_by("-last_activity_at", "pk")
    return (
        threads.filter(title__icontains=query)
        .annotate(
            exact=Case(
                When(title__iexact=query, then=Value(0)), default=Value(1), output_field=IntegerField()
            )
        )
        .order_by("exact", "-last_activity_at", "pk")
    )


def memory_user_suggestions(*, principal, query: str) -> list[Suggestion]:
    """Memory users by display name, canonical id, channel external id or id; with no query,
    the most recently seen."""
    return [_user_suggestion(user) for user in _memory_users(principal, picker_query(query))[:PICKER_LIMIT]]


def thread_suggestions(*, principal, query: str) -> list[Suggestion]:
    """Threads by title or id; with no query, the most recently active."""
    return [_thread_suggestion(thread) for thread in _threads(principal, picker_query(query))[:PICKER_LIMIT]]


@dataclass(frozen=True)
class Resolved:
    """What a picker field's text names: one row (`suggestion`), or an `error` to show."""

    suggestion: Suggestion | None = None
    error: str = ""


def _resolve(rows, query: str, noun: str, plural: str, build) -> Resolved:
    if _as_uuid(query) is not None:
        found = rows.first()
        # An id out of scope filters to nothing, exactly like an unknown one.
        return Resolved(build(found) if found is not None else None)
    # Exact matches sort first: one exact match wins over any number of partial ones.
    matches = list(rows[:2])
    if not matches:
        return Resolved(error=f"No {noun} matches “{query}”.")
    if len(matches) == 1 or (matches[0].exact == 0 and matches[1].exact != 0):
        return Resolved(build(matches[0]))
    return Resolved(error=f"Several {plural} match “{query}”: pick one from the list or type more.")


def memory_user_resolve(*, principal, text: str) -> Resolved:
    """The memory user a filter's text names: an id, or the one user a name, canonical id or
    external id matches (an exact match wins over partial ones)."""
    query = picker_query(text)
    if not query:
        return Resolved()
    return _resolve(_memory_users(principal, query), query, "memory user", "memory users", _user_suggestion)


def thread_resolve(*, principal, text: str) -> Resolved:
    """The thread a filter's text names: an id, or the one thread a title matches."""
    query = picker_query(text)
    if not query:
        return Resolved()
    return _resolve(_threads(principal, query), query, "thread", "threads", _thread_suggestion)
