"""Full page or fragment: the one place that picks what an htmx request gets back."""

from django.contrib import messages
from django.shortcuts import render
from django_htmx.http import trigger_client_event


def render_page(request, template: str, context: dict, *, partials: dict[str, str] | None = None, status=200):
    """The whole page, or for htmx the partial registered for the request's HX-Target.

    History restores (the back button after the htmx cache is gone) always get the whole
    page, since htmx swaps the response into <body>.
    """
    if request.htmx and not request.htmx.history_restore_request and partials:
        name = partials.get(request.htmx.target or "", partials.get("*"))
        if name:
            return render(request, f"{template}#{name}", context, status=status)
    return render(request, template, context, status=status)


def toast(request, response, message: str, *, level: str = "success"):
    """Tell the operator what a write did: an htmx event, or a flash message after a redirect."""
    if request.htmx:
        trigger_client_event(response, "toast", {"message": message, "level": level})
    else:
        messages.add_message(request, messages.ERROR if level == "error" else messages.SUCCESS, message)
    return response


def refused(request, response, *, status: int, message: str = ""):
    """A refused write, `response` being the page or partial re-rendered with the reason in
    place (a bound form's errors, an inline `role="alert" data-refusal="<code>"`).

    A plain form post answers the refusal's own status (400, 404, 409). htmx gets 200: htmx 2
    swaps no 4xx response and this project sets no `htmx.config.responseHandling`, so a 4xx
    would leave the form as typed, with the script's generic "Something went wrong" toast and
    no reason on the page. `message` is toasted for htmx too; a plain post shows it once, in
    place, since a flash message would repeat it on the next page.
    """
    if not request.htmx:
        response.status_code = status
        return response
    response.status_code = 200
    return toast(request, response, message, level="error") if message else response


def action_refused(request, render, *, status: int, message: str):
    """A refused row action: a button of a row or of the selection (batch delete, a review
    decision, a member's role or removal, Erase, a hold's release). `render()` answers it as
    the action does when it goes through, a fragment for htmx, and for a plain post the whole
    page (browser.lib.rendering.render_page), with the reason in place where the page has one.

    A plain post answers the refusal's status: a redirect with a flash message, as a write that
    went through answers, told a client without htmx nothing. The reason is also added to the
    page's messages before it renders, so that page shows it (base.html lists them) and the next
    one does not. htmx gets 200 and a toast, as refused() says.
    """
    if not request.htmx:
        messages.error(request, message)
    return refused(request, render(), status=status, message=message)
