"""The single error contract of the API: {"error": {"code", "message", "fields"}}.

Services raise `ApplicationError` (or Django's `ValidationError`); the handler below turns
every exception DRF sees into that body, so no client mistake becomes a 500.
"""

import logging

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

logger = logging.getLogger(__name__)

BODY_TOO_LARGE = "Request body is larger than the limit of {limit} bytes."
NOT_FOUND = "Not found."
INVALID_INPUT = "Invalid input."
UNKNOWN_FIELD = "Unknown field."
AGENT_REQUIRED = "This key is not bound to an agent: pass `agent` (an agent slug)."
READ_ONLY_KEY = "This API key is read-only."


class ApplicationError(Exception):
    """A client-caused failure with a stable machine-readable code."""

    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, *, code: str = "invalid", fields=None, status_code=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.fields = fields or {}
        if status_code is not None:
            self.status_code = status_code


class NotFoundError(ApplicationError):
    status_code = status.HTTP_404_NOT_FOUND

    def __init__(self, message: str = NOT_FOUND, **kwargs):
        kwargs.setdefault("code", "not_found")
        super().__init__(message, **kwargs)


class ConflictError(ApplicationError):
    status_code = status.HTTP_409_CONFLICT

    def __init__(self, message: str, **kwargs):
        kwargs.setdefault("code", "conflict")
        super().__init__(message, **kwargs)


def error_body(code: str, message: str, fields=None) -> dict:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _flatten(detail):
    """DRF error detail (nested dict/list of ErrorDetail) -> plain JSON of strings."""
    if isinstance(detail, dict):
        return {key: _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_flatten(item) for item in detail]
    return str(detail)


def _django_validation_fields(exc: DjangoValidationError) -> dict:
    if hasattr(exc, "error_dict"):
        return {
            field: [str(m) for e in errors for m in e.messages] for field, errors in exc.error_dict.items()
        }
    return {"non_field_errors": list(exc.messages)}


_CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def api_exception_handler(exc, context):
    if isinstance(exc, ApplicationError):
        return Response(error_body(exc.code, exc.message, exc.fields), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        fields = _django_validation_fields(exc)
        return Response(error_body("invalid", INVALID_INPUT, fields), status=400)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    # Imported here: rest_framework.views imports the authentication classes, which import this module.
    from rest_framework.views import exception_handler

    response = exception_handler(exc, context)
    if response is None:
        return None
    code = _CODES.get(response.status_code, "error")
    if isinstance(exc, exceptions.ValidationError):
        detail = _flatten(exc.detail)
        if isinstance(detail, list):
            detail = {"non_field_errors": detail}
        response.data = error_body("invalid", INVALID_INPUT, detail)
        return response
    if isinstance(exc, exceptions.ParseError):
        response.data = error_body("malformed_request", str(exc.detail))
        return response
    if isinstance(exc, exceptions.APIException):
        message = exc.detail if isinstance(exc.detail, str) else _flatten(exc.detail)
        response.data = error_body(code, str(message))
    return response


def json_error_response(status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(code, message), status=status_code)
