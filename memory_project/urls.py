import sys

from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from core.apis import healthz, readyz
from core.errors import (
    error_body,
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
