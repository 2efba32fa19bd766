"""The single error contract of the API: {"error": {"code", "message", "fields"}}.

Services raise `ApplicationError` (or Django's `ValidationError`); the handler below turns
every exception DRF sees into that body, so no client mistake becomes a 500. A value the
database refuses (out of range, too long, untranslatable) that slipped past a serializer is
still a 400, an unreachable database a 503 with Retry-After, and anything else a JSON 500
carrying the request id that is logged with its traceback (core.middleware).
"""

import logging

import psycopg
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, InterfaceError, OperationalError
from django.http import Http404, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from kombu.exceptions import OperationalError as BrokerUnavailable
from rest_framework import exceptions, status
from rest_framework.response import Response

logger = logging.getLogger(__name__)

BODY_TOO_LARGE = "Request body is larger than the limit of {limit} bytes."
NOT_FOUND = "Not found."
INVALID_INPUT = "Invalid input."
UNKNOWN_FIELD = "Unknown field."
AGENT_REQUIRED = "This key is not bound to an agent: pass `agent` (an agent slug)."
READ_ONLY_KEY = "This API key is read-only."
LENGTH_REQUIRED = "A chunked request body is not accepted here: send a Content-Length."
NUL_IN_URL = "The request path or query string contains a NUL character (%00)."
VALUE_REFUSED = "A value does not fit what can be stored (too long, out of range or not text)."
SERVICE_UNAVAILABLE = "The database is unavailable; retry shortly."
QUEUE_UNAVAILABLE = "The task queue is unavailable, so nothing was queued; retry shortly."
DATABASE_TIMEOUT = (
    "The database did not finish this request in time (a statement or a lock wait ran out); retry shortly."
)
SERVER_ERROR = "Internal server error."
REFERENCE_GONE = "Not found: a row this request refers to was deleted while it ran."
# Seconds a client should wait after a 503 while the database restarts or reconnects.
RETRY_AFTER_SECONDS = 5


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
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


# Django wraps driver errors in its own classes; psycopg's may also surface unwrapped (raw
# connections, COPY). NumericValueOutOfRange, StringDataRightTruncation,
# CharacterNotInRepertoire and UntranslatableCharacter are all psycopg.DataError.
_VALUE_ERRORS = (DataError, psycopg.DataError)
_UNAVAILABLE_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
# Past one of PostgreSQL's own limits (SQLSTATE class 54: an index row too large, a statement
# too deep): OperationalErrors, but the request is what cannot be stored, and a retry never
# helps, so a 400 and not a 503 with Retry-After.
_LIMIT_ERRORS = (
    psycopg.errors.ProgramLimitExceeded,
    psycopg.errors.StatementTooComplex,
    psycopg.errors.TooManyColumns,
    psycopg.errors.TooManyArguments,
)
# Every reference is resolved before a write, so a foreign key the database refuses names a
# row another request deleted in between (a thread deleted while its checkpoint's writes
# waited on the delete's lock): what is referred to is gone, as a 404 says. A delete refused
# because rows still refer to the deleted row is not that (_referenced_row_deleted).
_REFERENCE_ERRORS = (psycopg.errors.ForeignKeyViolation,)
# A request's statement_timeout or lock_timeout ran out (core.lib.postgresql), or the
# statement was cancelled: subclasses of OperationalError, told apart by the driver's error.
_TIMEOUT_ERRORS = (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)


def _driver_error(exc):
    """The psycopg error behind `exc` (Django wraps it), or `exc` itself."""
    cause = exc.__cause__
    return cause if isinstance(cause, psycopg.Error) else exc


# Deadlock detected, serialization failure: the transaction lost to a concurrent one, not to
# its data, and the same work may succeed when run again.
_LOST_SQLSTATES = frozenset({"40P01", "40001"})


def transaction_lost(exc) -> bool:
    """Whether the database aborted `exc`'s transaction for a concurrent one's sake (a deadlock
    victim, a serialization failure): nothing of it was stored, and running it again from the
    start may succeed. Callers that can run their whole transaction again do so, a bounded
    number of times (portability's import, review's decisions)."""
    return getattr(_driver_error(exc), "sqlstate", None) in _LOST_SQLSTATES


def _referenced_row_deleted(error) -> bool:
    """Whether a foreign key violation is a row deleted while rows still refer to it: the
    server's own delete (a deferred constraint a service left unmet at commit), never a
    reference the request made, so not a 404. PostgreSQL tells the two apart only in its
    message ("update or delete on table ..."); under a translated lc_messages this answers
    False, and the violation is the 404 of a reference."""
    primary = getattr(getattr(error, "diag", None), "message_primary", None) or ""
    return primary.startswith("update or delete on table")


def backend_error(exc) -> tuple[int, dict, dict] | None:
    """(status, body, headers) when the database refused a value (400) or a reference to a row
    deleted meanwhile (404), or cannot be reached or did not finish in time, or the broker
    cannot be reached (503); None for any other exception. The REST API answers with them, and
    the MCP server too (runtime.mcp).

    The broker: a request whose task is the whole of what it asked for (a retention run now)
    could not queue it. A task whose work a sweep does anyway never gets here
    (core.lib.celery_task)."""
    if isinstance(exc, BrokerUnavailable):
        logger.error("Broker unavailable: %s", exc)
        body = error_body("service_unavailable", QUEUE_UNAVAILABLE)
        return 503, body, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if isinstance(exc, _VALUE_ERRORS) or isinstance(_driver_error(exc), _LIMIT_ERRORS):
        logger.warning("Database refused a value: %s", exc)
        return 400, error_body("invalid", VALUE_REFUSED), {}
    if isinstance(_driver_error(exc), _REFERENCE_ERRORS) and not _referenced_row_deleted(_driver_error(exc)):
        logger.warning("A referenced row was deleted meanwhile: %s", exc)
        return 404, error_body("not_found", REFERENCE_GONE), {}
    if isinstance(_driver_error(exc), _TIMEOUT_ERRORS):
        logger.error("Database time limit reached: %s", exc)
        body = error_body("database_timeout", DATABASE_TIMEOUT)
        return 503, body, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if isinstance(exc, _UNAVAILABLE_ERRORS):
        logger.error("Database unavailable: %s", exc)
        body = error_body("service_unavailable", SERVICE_UNAVAILABLE)
        return 503, body, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return None


def unexpected_error_response(exc, *, request_id: str) -> JsonResponse:
    """The body for an exception that reached the top of an /api/ request unhandled."""
    database = backend_error(exc)
    if database is not None:
        status_code, body, headers = database
        return JsonResponse(body, status=status_code, headers=headers)
    return server_error_response(request_id=request_id)


def unavailable_page(exc) -> HttpResponse | None:
    """The page for a browser request (the memory browser, the admin) whose database is down
    or out of time, or whose task could not be queued: a 503 the operator is told to retry,
    with Retry-After, instead of Django's 500; None for any other exception. The template
    reads nothing from the database."""
    failure = backend_error(exc)
    if failure is None or failure[0] != 503:
        return None
    status_code, body, headers = failure
    content = render_to_string("503.html", {"message": body["error"]["message"]})
    return HttpResponse(content, status=status_code, headers=headers)


def server_error_response(*, request_id: str) -> JsonResponse:
    body = error_body("server_error", SERVER_ERROR)
    body["error"]["request_id"] = request_id
    return JsonResponse(body, status=500)


def api_exception_handler(exc, context):
    database = backend_error(exc)
    if database is not None:
        # Imported here for the same reason as exception_handler below.
        from rest_framework.views import set_rollback

        # The failed statement aborted the request's transaction, if it had one.
        set_rollback()
        status_code, body, headers = database
        return Response(body, status=status_code, headers=headers)
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
        response.data = error_body("malformed_request", str(exc.detail), getattr(exc, "fields", None))
        return response
    if isinstance(exc, exceptions.APIException):
        message = exc.detail if isinstance(exc.detail, str) else _flatten(exc.detail)
        response.data = error_body(code, str(message))
    return response


def json_error_response(status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(code, message), status=status_code)
