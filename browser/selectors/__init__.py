"""Reads the browser needs that no tier exposes: memberships, the thread page's message tree,
and what the filter pickers suggest and resolve. Pages with reads of their own keep them in a
module of this package named after the page."""

import contextlib
import json
import uuid
from dataclasses import dataclass, field

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
class ToolCall:
    """One call of an assistant message, with the tool message that answered it (if loaded)."""

    id: str
    name: str
    arguments: str  # pretty-printed when the model sent JSON, else as sent
    result: object = None  # the paired tool Message, or None


@dataclass(frozen=True)
class TreeRow:
    message: object
    # 0 on the first-written path; +1 for each regeneration (a later sibling) on the way here.
    branch: int
    is_branch_start: bool
    in_window: bool
    calls: list = field(default_factory=list)  # ToolCall of an assistant message
    call: ToolCall | None = None  # for a tool message: the call it answers


# The thread page shows the newest messages only; a 100,000-message thread stays one page.
THREAD_TREE_LIMIT = 300
# Arguments longer than this are cut on the thread page (a model may send megabytes).
TOOL_ARGUMENTS_CHARS = 10_000


def tool_arguments_display(arguments: str) -> str:
    """A call's arguments as indented JSON when they parse, else the text the model sent."""
    text = arguments or ""
    with contextlib.suppress(ValueError, TypeError, RecursionError):
        text = json.dumps(json.loads(text), ensure_ascii=False, indent=2)
    if len(text) > TOOL_ARGUMENTS_CHARS:
        text = f"{text[:TOOL_ARGUMENTS_CHARS]}… ({len(text) - TOOL_ARGUMENTS_CHARS:,} more characters)"
    return text


def _pair_tool_calls(messages) -> tuple[dict, dict]:
    """Each assistant message's calls, and each tool message's call.

    A tool message answers the nearest ancestor assistant message that made a call with its
    `tool_call_id` (a regenerated branch may reuse ids, so the id alone is not enough).
    """
    by_id = {m.pk: m for m in messages}
    calls_of: dict = {}
    call_of_result: dict = {}
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls_of[message.pk] = {
                c.get("id"): c for c in message.tool_calls if isinstance(c, dict) and c.get("id")
            }
    results: dict = {}
    for message in messages:
        if message.role != "tool" or not message.tool_call_id:
            continue
        ancestor = by_id.get(message.parent_id)
        while ancestor is not None and message.tool_call_id not in calls_of.get(ancestor.pk, {}):
            ancestor = by_id.get(ancestor.parent_id)
        if ancestor is not None:
            results.setdefault((ancestor.pk, message.tool_call_id), message)
    calls: dict = {}
    for pk, made in calls_of.items():
        calls[pk] = []
        for call_id, call in made.items():
            result = results.get((pk, call_id))
            pair = ToolCall(
                id=call_id,
                name=str(call.get("name") or ""),
                arguments=tool_arguments_display(call.get("arguments") or ""),
                result=result,
            )
            calls[pk].append(pair)
            if result is not None:
                call_of_result[result.pk] = pair
    return calls, call_of_result


def thread_message_tree(*, thread, window_ids) -> tuple[list[TreeRow], int]:
    """The newest messages of a thread in write order, each with its branch level.

    A message that is not the first child of its parent starts a branch (a regenerated
    answer or an edited question). Assistant messages carry their tool calls paired with the
    tool messages that answered them. An archived tool result (over
    THREADS_TOOL_RESULT_ARCHIVE_CHARS) loads only its preview as `text`; `content_chars`
    is its whole length. Returns the rows and the number of older messages left out.
    """
    from django.conf import settings
    from django.db.models import Case, F, TextField, When
    from django.db.models.functions import Left, Length

    from threads.models import Message

    total = thread.message_count
    fields = ("id", "role", "parent_id", "seq", "created_at", "token_count", "node_id", "name")
    newest = list(
        Message.objects.filter(thread=thread)
        .order_by("-seq")
        .only(*fields, "tool_calls", "tool_call_id", "archived")
        .annotate(
            text=Case(
                When(archived=True, then=Left("content", settings.THREADS_TOOL_RESULT_PREVIEW_CHARS)),
                default=F("content"),
                output_field=TextField(),
            ),
            content_chars=Length("content"),
        )[:THREAD_TREE_LIMIT]
    )
    newest.reverse()
    calls, call_of_result = _pair_tool_calls(newest)
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
        rows.append(
            TreeRow(
                message,
                level,
                starts,
                str(message.pk) in window,
                calls=calls.get(message.pk, []),
                call=call_of_result.get(message.pk),
            )
        )
    return rows, max(total - len(newest), 0)


def thread_tool_result(*, principal, thread_id, message_id):
    """One tool message, whole, of a thread the principal may read; anything else is NotFoundError."""
    from core.errors import NotFoundError
    from threads.selectors import message_get, thread_get

    thread = thread_get(principal=principal, thread_id=thread_id)
    message = message_get(thread=thread, message_id=message_id)
    if message.role != "tool":
        raise NotFoundError("Tool result not found.")
    return thread, message


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
