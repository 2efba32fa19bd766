"""The Users tab: the people agents talk to, their channel identities, merge and erasure.
A user's own page is the person page (browser.views.person)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from browser.access import ADMIN, EDIT, workspace_view
from browser.forms import MemoryUserEditForm, MemoryUserMergeForm, form_add_service_errors
from browser.lib.listing import Sort
from browser.lib.rendering import refused, toast
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from browser.selectors.person import erase_refusal_people, people_survivors
from browser.views.person import person_page
from core.errors import ApplicationError, NotFoundError
from core.lib.replica import read_replica
from identities.filters import MemoryUserFilter
from identities.models import MemoryUser
from identities.selectors import memory_user_get, memory_user_list
from identities.services import memory_user_batch_delete, memory_user_merge

MERGE_TARGET_UNKNOWN = "No user with this canonical id or id in this workspace."


def _erase_refusal_links(request, refusal) -> list[tuple[str, str]]:
    """The pages of the people a refused erasure names: a merged record's survivor (erased in
    its place), a held person (whose page lists and releases every hold covering them)."""
    principal = request.operator.principal
    verb = "Erase {} instead" if refusal.code == "merged" else "Legal holds of {}"
    return [
        (
            verb.format(person),
            reverse("memories:user", kwargs={"workspace_id": principal.workspace.pk, "pk": person.pk}),
        )
        for person in erase_refusal_people(principal=principal, refusal=refusal)
    ]


USERS = TabSpec(
    slug="users",
    item="user",
    noun="user",
    noun_plural="users",
    template="memories/users.html",
    filterset=MemoryUserFilter,
    list=lambda principal, filters: memory_user_list(principal=principal, filters=filters),
    get=lambda principal, pk: memory_user_get(principal=principal, memory_user_id=pk),
    sorts=[
        Sort("last_seen", "Last seen", "last_seen_at"),
        Sort("first_seen", "First seen", "first_seen_at"),
        Sort("name", "Name", "display_name"),
        Sort("canonical_id", "Canonical id", "canonical_id"),
    ],
    default_sort="-last_seen",
    batch_delete=lambda principal, ids: memory_user_batch_delete(principal=principal, ids=ids),
    model=MemoryUser,
    delete_agent_field=None,
    delete_admin_only=True,
    edit_form=MemoryUserEditForm,
    context_name="memory_user",
    refusal_links=_erase_refusal_links,
    # The "merged into" badge names the end of a chain of merges, not its next hop.
    prepare_rows=lambda rows: people_survivors(people=rows),
)


@read_replica
@workspace_view()
def users_tab(request):
    return tab_list(request, USERS)


@read_replica
@workspace_view()
def user_detail(request, pk):
    """The person page (browser.views.person); an inline edit's Cancel gets its row back."""
    if request.htmx and request.htmx.target == f"row-{pk}":
        return tab_detail(request, USERS, pk)
    return person_page(request, pk)


@workspace_view(EDIT)
def user_edit(request, pk):
    return tab_edit(request, USERS, pk)


@require_POST
@workspace_view(ADMIN)
def users_delete(request):
    return tab_delete(request, USERS)


def _merge_target(principal, value: str):
    """The user named by canonical id or id, within the operator's workspace."""
    import uuid

    try:
        return memory_user_get(principal=principal, memory_user_id=uuid.UUID(value))
    except (ValueError, NotFoundError):
        pass
    target = memory_user_list(principal=principal, filters={"canonical_id": value, "merged": "all"}).first()
    if target is None:
        raise ApplicationError(MERGE_TARGET_UNKNOWN, fields={"target": [MERGE_TARGET_UNKNOWN]})
    return target


@require_POST
@workspace_view(EDIT)
def user_merge(request, pk):
    """Merge this user into the one named in the form, then open the kept user. A refusal is
    the person page with the merge form's errors (and a toast for htmx)."""
    principal = request.operator.principal
    try:
        source = memory_user_get(principal=principal, memory_user_id=pk)
    except NotFoundError:
        raise Http404("No such user.")
    form = MemoryUserMergeForm(request.POST)
    if not form.is_valid():
        message = " ".join(form.errors.get("target", ["Name a user."]))
        return refused(request, person_page(request, pk, merge_form=form), status=400, message=message)
    try:
        target = _merge_target(principal, form.cleaned_data["target"].strip())
        memory_user_merge(source=source, target=target, actor=principal.actor)
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        response = person_page(request, pk, merge_form=form)
        return refused(request, response, status=exc.status_code, message=exc.message)
    message = f"Merged {source} into {target}."
    url = reverse("memories:user", kwargs={"workspace_id": principal.workspace.pk, "pk": target.pk})
    if request.htmx:
        # The kept user's page is a different URL: load it whole, with the flash message.
        messages.success(request, message)
        return HttpResponseClientRedirect(url)
    toast(request, None, message)
    return redirect(url)
