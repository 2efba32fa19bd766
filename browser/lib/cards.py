"""Inline edit of one card of a detail page (an episode's record, a checkpoint's metadata).

The list row's inline edit is `browser.lib.tabs.tab_edit`; this is the same exchange for a
block of the detail page. The card `<item>-<card>` is an element with that id and a partial
of that name in the tab's template, and `<item>-<card>-edit` is its form. With HX-Target set
to the card, GET answers the form and a valid POST the re-rendered card (plus a toast);
anything else gets the `<item>-edit` page, and a save redirects to the detail page, so the
edit works without JavaScript. Invalid input re-renders the form with its errors, refused
(browser.lib.rendering): 200 for htmx, the refusal's status for a plain form post.
"""

from collections.abc import Callable

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from browser.forms import form_add_service_errors
from browser.lib.rendering import refused, render_page, toast
from browser.lib.tabs import TabSpec, base_context
from core.errors import ApplicationError, NotFoundError


def _get_or_404(spec: TabSpec, principal, pk):
    try:
        return spec.get(principal, pk)
    except NotFoundError:
        raise Http404(f"No such {spec.noun}.")


def card_edit(
    request,
    spec: TabSpec,
    pk,
    *,
    card: str,
    form_class: type,
    label: str,
    form_kwargs: Callable | None = None,
):
    """`form_class` has `initial_for(obj)` and `update(principal, obj)` calling the tier's
    service; `form_kwargs(obj)` adds constructor arguments (fields that depend on the row)."""
    principal = request.operator.principal
    obj = _get_or_404(spec, principal, pk)
    target = f"{spec.item}-{card}"
    inline = bool(request.htmx) and request.htmx.target == target
    detail_url = reverse(
        f"memories:{spec.item}", kwargs={"workspace_id": request.operator.workspace.pk, "pk": obj.pk}
    )
    extra = form_kwargs(obj) if form_kwargs else {}
    auto_id = f"{card}-{obj.pk.hex[:12]}-%s"
    status = None
    if request.method == "POST":
        form = form_class(request.POST, auto_id=auto_id, **extra)
        status = 400
        if form.is_valid():
            try:
                updated = form.update(principal, obj)
            except ApplicationError as exc:
                form_add_service_errors(form, exc)
                status = exc.status_code
            else:
                message = f"Saved {label}."
                if not inline:
                    # No card to swap (the edit page): the detail page, whole, with the message.
                    messages.success(request, message)
                    if request.htmx:
                        return HttpResponseClientRedirect(detail_url)
                    return redirect(detail_url)
                updated = _get_or_404(spec, principal, updated.pk)
                context = {**base_context(spec, request), spec.name: updated, "page": "detail"}
                return toast(request, render(request, f"{spec.template}#{target}", context), message)
    else:
        form = form_class(initial=form_class.initial_for(obj), auto_id=auto_id, **extra)
    context = {
        **base_context(spec, request),
        spec.name: obj,
        "form": form,
        "page": "edit",
        "edit_url": request.path,
        "detail_url": detail_url,
        "edit_label": label,
    }
    if inline:
        response = render(request, f"{spec.template}#{target}-edit", context)
    else:
        response = render_page(request, spec.template, context, partials={"main": f"{spec.item}-edit"})
    return refused(request, response, status=status) if status else response
