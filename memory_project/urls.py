import sys

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from core.apis import healthz, readyz
from core.errors import (
    BODY_TOO_LARGE,
    error_body,
    json_error_response,
    server_error_response,
    unavailable_page,
    unexpected_error_response,
)
from core.middleware import current_request_id

api_v1 = [
    path("", include("core.urls")),
    path("", include("identities.urls")),
    path("", include("threads.urls")),
    path("", include("facts.urls")),
    path("", include("episodes.urls")),
    path("", include("episodic.urls")),
    path("", include("procedures.urls")),
    path("", include("checkpoints.urls")),
    path("", include("store.urls")),
    path("", include("webhooks.urls")),
    path("", include("reflection.urls")),
    path("", include("review.urls")),
    path("", include("portability.urls")),
    path("", include("retention.urls")),
    path("", include("provenance.urls")),
    path("", include("runtime.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("api/v1/", include((api_v1, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("memories/", include("browser.urls")),
]


# A form Django refuses before any view runs: what the /memories script shows for a 413.
FORM_TOO_LARGE = (
    "The form is too large to send (more than {limit} bytes, or more than {fields} fields); "
    "nothing was saved."
)


def handler400(request, exception=None):
    """Django's own refusals of a request. A body over DATA_UPLOAD_MAX_MEMORY_SIZE, or with more
    fields than DATA_UPLOAD_MAX_NUMBER_FIELDS, is refused before any view runs (the CSRF check
    reads it first): a 413 saying so, which htmx's error handler in /memories shows, rather
    than the bare 400 page every other refusal (a disallowed host) gets. The API's bodies are
    limited before that (core.middleware.ApiBodyLimitMiddleware, the same 413)."""
    if isinstance(exception, (RequestDataTooBig, TooManyFieldsSent)):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if request.path.startswith("/api/"):
            return json_error_response(413, "payload_too_large", BODY_TOO_LARGE.format(limit=limit))
        message = FORM_TOO_LARGE.format(limit=limit, fields=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS)
        return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
    return defaults.bad_request(request, exception)


def handler404(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def handler500(request):
    """Reached only for errors outside a view (a failing middleware, such as the session's save
    when the database is down); Django has logged the traceback. A database or broker that is
    down, or a database out of time, answers as it does in a view: the API's 503 body, or the
    503 page."""
    exc = sys.exc_info()[1]
    if request.path.startswith("/api/"):
        request_id = getattr(request, "id", None) or current_request_id()
        if exc is None:
            return server_error_response(request_id=request_id)
        return unexpected_error_response(exc, request_id=request_id)
    return (unavailable_page(exc) if exc is not None else None) or defaults.server_error(request)
