"""Webhook subscriptions of a workspace and their delivery logs, for its admins."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from browser.access import ADMIN, workspace_view
from browser.forms import DeliveryFilterForm, WebhookCreateForm, form_add_service_errors
from browser.lib.rendering import refused, render_page, toast
from core.errors import ApplicationError, NotFoundError
from webhooks.selectors import webhook_delivery_list, webhook_subscription_get, webhook_subscription_list
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


def _list_page(request, *, form=None, created=None):
    operator = request.operator
    context = {
        "tab": "webhooks",
        "subscriptions": webhook_subscription_list(principal=operator.principal),
        "form": form or WebhookCreateForm(),
        "created": created,
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


def _detail_page(request, subscription, *, secret=None):
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
    }
    response = render_page(request, "memories/webhook.html", context, partials=DETAIL_PARTIALS)
    if secret:
        response["Cache-Control"] = "no-store"
    return response


def _act(request, subscription_id, action):
    """Run `action(principal, subscription) -> message` and show the page again."""
    operator = request.operator
    subscription = _subscription_or_404(operator, subscription_id)
    try:
        message, level = action(operator.principal, subscription), "success"
    except ApplicationError as exc:
        message, level = exc.message, "error"
    if not request.htmx:
        toast(request, None, message, level=level)
        return redirect(_detail_url(operator, subscription))
    subscription.refresh_from_db()
    return toast(request, _detail_page(request, subscription), message, level=level)


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
    operator = request.operator
    subscription = _subscription_or_404(operator, subscription_id)
    secret = webhook_secret_rotate(principal=operator.principal, subscription=subscription)
    response = _detail_page(request, subscription, secret=secret)
    return toast(request, response, "New secret made. Copy it now; the old one no longer signs.")


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
