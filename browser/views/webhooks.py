"""Webhook subscriptions of a workspace and their delivery logs, for its admins."""

from functools import partial

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect, push_url

from browser.access import ADMIN, workspace_view
from browser.forms import DeliveryFilterForm, WebhookCreateForm, form_add_service_errors
from browser.lib.rendering import action_refused, refused, render_page, toast
from core.errors import ApplicationError, NotFoundError
from webhooks.models import WebhookSubscription
from webhooks.selectors import (
    SUBSCRIPTION_NOT_FOUND,
    webhook_delivery_list,
    webhook_subscription_get,
    webhook_subscription_list,
)
from webhooks.services import (
    webhook_ping,
    webhook_secret_rotate,
    webhook_subscription_create,
    webhook_subscription_delete,
    webhook_subscription_update,
)

LIST_PARTIALS = {"main": "webhooks-panel", "webhooks-list": "webhooks-list"}
DETAIL_PARTIALS = {"main": "webhook-panel", "deliveries": "deliveries"}
DELIVERIES_PER_PAGE = 50


def _list_url(operator) -> str:
    return reverse("memories:webhooks", kwargs={"workspace_id": operator.workspace.pk})


def _detail_url(operator, subscription) -> str:
    return reverse(
        "memories:webhook", kwargs={"workspace_id": operator.workspace.pk, "subscription_id": subscription.pk}
    )


def _subscription_or_404(operator, subscription_id):
    """The workspace's subscription; one of another workspace, or deleted, is a 404."""
    try:
        return webhook_subscription_get(principal=operator.principal, subscription_id=subscription_id)
    except NotFoundError:
        raise Http404("No such webhook.") from None


def _list_page(request, *, form=None, created=None, refusal=None):
    operator = request.operator
    context = {
        "tab": "webhooks",
        "subscriptions": webhook_subscription_list(principal=operator.principal),
        "form": form or WebhookCreateForm(),
        "created": created,
        "refusal": refusal,
    }
    response = render_page(request, "memories/webhooks.html", context, partials=LIST_PARTIALS)
    if created:
        # The secret must never sit in a shared or back/forward cache.
        response["Cache-Control"] = "no-store"
    return response


@workspace_view(ADMIN)
def webhooks(request):
    return _list_page(request)


@require_POST
@workspace_view(ADMIN)
def webhook_create(request):
    operator = request.operator
    form = WebhookCreateForm(request.POST)
    if not form.is_valid():
        return refused(request, _list_page(request, form=form), status=400)
    try:
        subscription, secret = webhook_subscription_create(principal=operator.principal, **form.cleaned_data)
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _list_page(request, form=form), status=exc.status_code)
    response = _list_page(request, created={"subscription": subscription, "secret": secret})
    return toast(request, response, "Webhook created. Copy its signing secret now.")


@workspace_view(ADMIN)
def webhook_detail(request, subscription_id):
    subscription = _subscription_or_404(request.operator, subscription_id)
    return _detail_page(request, subscription)


def _detail_page(request, subscription, *, secret=None, refusal=None):
    operator = request.operator
    filters = DeliveryFilterForm(request.GET)
    status_filter = filters.cleaned_data["status"] if filters.is_valid() else ""
    deliveries = webhook_delivery_list(
        principal=operator.principal,
        subscription_id=subscription.pk,
        filters={"status": [status_filter]} if status_filter else None,
    )
    page = Paginator(deliveries, DELIVERIES_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "tab": "webhooks",
        "subscription": subscription,
        "filters": filters,
        "page": page,
        "secret": secret,
        "refusal": refusal,
    }
    response = render_page(request, "memories/webhook.html", context, partials=DETAIL_PARTIALS)
    if secret:
        response["Cache-Control"] = "no-store"
    return response


def _act(request, subscription_id, action):
    """Run `action(principal, subscription) -> message` and show the page again (_answered)."""
    operator = request.operator

    def run(subscription):
        message = action(operator.principal, subscription)
        if not request.htmx:
            toast(request, None, message)
            return redirect(_detail_url(operator, subscription))
        try:
            subscription.refresh_from_db()
        except WebhookSubscription.DoesNotExist:
            # Deleted since the action committed.
            raise NotFoundError(SUBSCRIPTION_NOT_FOUND) from None
        return toast(request, _detail_page(request, subscription), message)

    return _answered(request, subscription_id, run)


def _answered(request, subscription_id, run):
    """`run(subscription)`'s response for a button of a webhook's page, or its refusal.

    A refusal is answered as every refused row button is (action_refused): a plain post gets
    its status and the page with the reason in place, htmx a 200 and the same. A subscription
    that is gone (deleted meanwhile, even while the action ran, or of another workspace: the
    same answer) leaves the list of the workspace's webhooks to show it on."""
    try:
        subscription = webhook_subscription_get(
            principal=request.operator.principal, subscription_id=subscription_id
        )
        return run(subscription)
    except NotFoundError:
        # Also the service's locked re-read, finding it deleted since the read above.
        return _gone(request)
    except ApplicationError as exc:
        refusal = {"message": exc.message, "code": exc.code}
        answer = partial(_refused_page, request, subscription_id, refusal)
        return action_refused(request, answer, status=exc.status_code, message=exc.message)


def _gone(request):
    refusal = {"message": SUBSCRIPTION_NOT_FOUND, "code": "not_found"}

    def answer():
        response = _list_page(request, refusal=refusal)
        # The address bar leaves the page of a subscription that is not there.
        return push_url(response, _list_url(request.operator)) if request.htmx else response

    return action_refused(request, answer, status=404, message=SUBSCRIPTION_NOT_FOUND)


def _refused_page(request, subscription_id, refusal):
    """The subscription's page as it is now, with the refusal; the list if it went meanwhile."""
    try:
        subscription = webhook_subscription_get(
            principal=request.operator.principal, subscription_id=subscription_id
        )
    except NotFoundError:
        return _list_page(request, refusal=refusal)
    return _detail_page(request, subscription, refusal=refusal)


@require_POST
@workspace_view(ADMIN)
def webhook_toggle(request, subscription_id):
    def action(principal, subscription):
        subscription = webhook_subscription_update(
            principal=principal, subscription=subscription, is_active=not subscription.is_active
        )
        return "Webhook enabled." if subscription.is_active else "Webhook paused."

    return _act(request, subscription_id, action)


@require_POST
@workspace_view(ADMIN)
def webhook_ping_view(request, subscription_id):
    def action(principal, subscription):
        webhook_ping(principal=principal, subscription=subscription)
        return "Ping queued; its delivery shows below."

    return _act(request, subscription_id, action)


@require_POST
@workspace_view(ADMIN)
def webhook_rotate(request, subscription_id):
    def run(subscription):
        secret = webhook_secret_rotate(principal=request.operator.principal, subscription=subscription)
        response = _detail_page(request, subscription, secret=secret)
        return toast(request, response, "New secret made. Copy it now; the old one no longer signs.")

    return _answered(request, subscription_id, run)


@require_POST
@workspace_view(ADMIN)
def webhook_delete(request, subscription_id):
    operator = request.operator
    subscription = _subscription_or_404(operator, subscription_id)
    webhook_subscription_delete(principal=operator.principal, subscription=subscription)
    messages.success(request, f"Webhook to {subscription.url} deleted.")
    if request.htmx:
        return HttpResponseClientRedirect(_list_url(operator))
    return redirect(_list_url(operator))
