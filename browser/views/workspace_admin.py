"""Members and API keys of a workspace, for its admins."""

from functools import partial

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from browser.access import ADMIN, workspace_view
from browser.forms import ApiKeyCreateForm, MemberAddForm, MemberRoleForm, form_add_service_errors
from browser.lib.rendering import action_refused, refused, render_page, toast
from browser.selectors import api_key_get, member_get
from browser.services import member_add, member_remove, member_role_change
from core.errors import ApplicationError
from core.selectors import agent_list, api_key_list, membership_list
from core.services import api_key_create, api_key_revoke

MEMBERS_PARTIALS = {"main": "members-panel", "members-list": "members-list"}
KEYS_PARTIALS = {"main": "keys-panel", "keys-list": "keys-list"}
UNKNOWN_ROLE = "Unknown role."


def _members_page(request, *, form=None):
    operator = request.operator
    context = {
        "tab": "members",
        "members": membership_list(workspace=operator.workspace),
        "form": form or MemberAddForm(),
        "roles": MemberRoleForm.base_fields["role"].choices,
    }
    return render_page(request, "memories/members.html", context, partials=MEMBERS_PARTIALS)


@workspace_view(ADMIN)
def members(request):
    return _members_page(request)


@require_POST
@workspace_view(ADMIN)
def member_create(request):
    operator = request.operator
    form = MemberAddForm(request.POST)
    if not form.is_valid():
        return refused(request, _members_page(request, form=form), status=400)
    try:
        membership = member_add(
            workspace=operator.workspace, actor=operator.principal.actor, **form.cleaned_data
        )
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _members_page(request, form=form), status=exc.status_code)
    message = f"{membership.user.get_username()} is now a {membership.get_role_display().lower()}."
    if not request.htmx:
        toast(request, None, message)
        return redirect(reverse("memories:members", kwargs={"workspace_id": operator.workspace.pk}))
    return toast(request, _members_page(request), message)


@require_POST
@workspace_view(ADMIN)
def member_role(request, membership_id):
    operator = request.operator
    membership = member_get(workspace=operator.workspace, membership_id=membership_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        return action_refused(request, partial(_members_page, request), status=400, message=UNKNOWN_ROLE)
    try:
        membership = member_role_change(
            membership=membership, actor=operator.principal.actor, role=form.cleaned_data["role"]
        )
    except ApplicationError as exc:
        return action_refused(
            request, partial(_members_page, request), status=exc.status_code, message=exc.message
        )
    message = f"{membership.user.get_username()} is now a {membership.get_role_display().lower()}."
    if not request.htmx:
        toast(request, None, message)
        return redirect(reverse("memories:members", kwargs={"workspace_id": operator.workspace.pk}))
    return toast(request, _members_page(request), message)


@require_POST
@workspace_view(ADMIN)
def member_delete(request, membership_id):
    operator = request.operator
    membership = member_get(workspace=operator.workspace, membership_id=membership_id)
    username = membership.user.get_username()
    try:
        member_remove(membership=membership, actor=operator.principal.actor)
    except ApplicationError as exc:
        return action_refused(
            request, partial(_members_page, request), status=exc.status_code, message=exc.message
        )
    message = f"{username} was removed from the workspace."
    if membership.user_id == request.user.pk:
        # Removing oneself leaves nothing to show here: the home page, whole.
        messages.success(request, message)
        if request.htmx:
            return HttpResponseClientRedirect(reverse("memories:home"))
        return redirect(reverse("memories:home"))
    if not request.htmx:
        toast(request, None, message)
        return redirect(reverse("memories:members", kwargs={"workspace_id": operator.workspace.pk}))
    return toast(request, _members_page(request), message)


def _keys_page(request, *, form=None, created=None):
    operator = request.operator
    agents = agent_list(principal=operator.principal)
    context = {
        "tab": "api-keys",
        "keys": api_key_list(workspace=operator.workspace).select_related("created_by"),
        "form": form or ApiKeyCreateForm(agents=agents),
        "created": created,
    }
    return render_page(request, "memories/api_keys.html", context, partials=KEYS_PARTIALS)


@workspace_view(ADMIN)
def api_keys(request):
    return _keys_page(request)


@require_POST
@workspace_view(ADMIN)
def api_key_new(request):
    """Create a key and show its secret in this response only; it is never retrievable again."""
    operator = request.operator
    form = ApiKeyCreateForm(request.POST, agents=agent_list(principal=operator.principal))
    if not form.is_valid():
        return refused(request, _keys_page(request, form=form), status=400)
    try:
        api_key, secret = api_key_create(
            workspace=operator.workspace,
            agent=form.cleaned_data["agent"],
            name=form.cleaned_data["name"],
            read_only=form.cleaned_data["read_only"],
            expires_in_days=form.cleaned_data["expires_in_days"],
            created_by=request.user,
        )
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _keys_page(request, form=form), status=exc.status_code)
    response = _keys_page(request, created={"api_key": api_key, "secret": secret})
    # The secret must never sit in a shared or back/forward cache.
    response["Cache-Control"] = "no-store"
    return toast(request, response, f"Key {api_key.prefix} created. Copy its secret now.")


@require_POST
@workspace_view(ADMIN)
def api_key_revoke_view(request, api_key_id):
    operator = request.operator
    api_key = api_key_revoke(api_key=api_key_get(workspace=operator.workspace, api_key_id=api_key_id))
    message = f"Key {api_key.prefix} revoked."
    if not request.htmx:
        toast(request, None, message)
        return redirect(reverse("memories:api-keys", kwargs={"workspace_id": operator.workspace.pk}))
    return toast(request, _keys_page(request), message)
