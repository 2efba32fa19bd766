from django.conf import settings

from core.errors import BODY_TOO_LARGE, json_error_response


class ApiBodyLimitMiddleware:
    """Refuse oversized API bodies with 413 before anything reads them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/"):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            limit = settings.API_MAX_BODY_BYTES
            if length > limit:
                return json_error_response(413, "payload_too_large", BODY_TOO_LARGE.format(limit=limit))
        return self.get_response(request)
