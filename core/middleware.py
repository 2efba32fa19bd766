"""Request-level guards of the API, applied before any view, parser or serializer runs.

- `RequestIdMiddleware` gives every request an id (a sane incoming `X-Request-ID` or a new
  one), puts it on every log line of the request and on the response, and turns an exception
  no view handled on /api/ into the documented JSON error body carrying that id (and, on
  the pages, a database or broker that is down, or a database out of time, into a 503 page).
- `AfterResponseMiddleware` runs what the request queued with `core.lib.after_response`
  (bookkeeping such as the recall counters) once the response has been sent.
- `ApiBodyLimitMiddleware` refuses oversized bodies (413) whether or not they declare a
  Content-Length, and NUL in an /api/ path or query string (400): PostgreSQL cannot compare
  or store it, so it would otherwise be a 500 in whichever query first used the value. A view
  that sets `body_streamed = True` reads its body as a stream under a limit of its own (the
  import, docs/export.md): the middleware only makes a chunked body readable for it.
- `ReadReplicaMiddleware` lets safe requests to views that opted in read from the replica,
  and pins a caller that wrote to the primary (core.lib.replica). Installed by the settings
  only when DATABASE_REPLICA_URL is set.
"""

import contextvars
import io
import logging
import re
import uuid
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.core.handlers.wsgi import LimitedStream

from core.errors import (
    BODY_TOO_LARGE,
    LENGTH_REQUIRED,
    NUL_IN_URL,
    json_error_response,
    unavailable_page,
    unexpected_error_response,
)
from core.lib.after_response import after_response_collect, after_response_run, after_response_stop
from core.lib.replica import (
    SAFE_METHODS,
    principal_pin,
    principal_pin_key,
    principal_pinned,
    reads_begin,
    reads_end,
    replica_configured,
    replica_usable,
    view_reads_replica,
)

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
# Printable, no spaces: an incoming id ends up in log lines and a response header.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def current_request_id() -> str:
    return _request_id.get()


class RequestIdLogFilter(logging.Filter):
    """Adds `request_id` to every record ("-" outside a request) for the log format."""

    def filter(self, record):
        # django.request logs a response after the middleware returned; its record carries the request.
        request_id = getattr(getattr(record, "request", None), "id", None)
        record.request_id = request_id or _request_id.get()
        return True


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        request.id = incoming if _SANE_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        token = _request_id.set(request.id)
        try:
            response = self.get_response(request)
        finally:
            _request_id.reset(token)
        if _is_api(request):
            response[REQUEST_ID_HEADER] = request.id
        return response

    def process_exception(self, request, exception):
        """An exception no view or DRF handler turned into a response: JSON on /api/, logged with
        the id; elsewhere a 503 page when the database or the broker is down or the database out
        of time (else Django's 500)."""
        if not _is_api(request):
            return unavailable_page(exception)
        response = unexpected_error_response(exception, request_id=request.id)
        if response.status_code == 500:
            logger.error(
                "Unhandled %s on %s %s (request_id=%s)",
                type(exception).__name__,
                request.method,
                request.path,
                request.id,
                exc_info=exception,
            )
        return response


class AfterResponseMiddleware:
    """Runs what the request queued with `after_response` when the server closes the
    response, after its last byte was written, with the request's id on its log lines."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        pending, token = after_response_collect()
        try:
            response = self.get_response(request)
        except BaseException:
            after_response_stop(token)
            after_response_run(pending)
            raise
        after_response_stop(token)
        if pending:
            close = response.close
            request_id = getattr(request, "id", None) or _request_id.get()

            def close_after_running():
                id_token = _request_id.set(request_id)
                try:
                    after_response_run(pending)
                finally:
                    _request_id.reset(id_token)
                    close()

            response.close = close_after_running
        return response


class ApiBodyLimitMiddleware:
    """Refuse NUL in API URLs with 400 before anything runs, and oversized API bodies with 413
    once the view is known (a view may stream its body under its own limit), before anything
    reads them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if _is_api(request):
            refusal = self._nul_in_url(request)
            if refusal is not None:
                return refusal
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not _is_api(request):
            return None
        view_class = getattr(view_func, "cls", None) or getattr(view_func, "view_class", None)
        if getattr(view_class, "body_streamed", False):
            return self._body_streamed(request)
        return self._body_limit(request)

    @staticmethod
    def _nul_in_url(request):
        query = request.META.get("QUERY_STRING", "")
        if "\x00" in request.path or b"\x00" in unquote_to_bytes(query.replace("+", " ")):
            return json_error_response(400, "malformed_request", NUL_IN_URL)
        return None

    @staticmethod
    def _body_limit(request):
        limit = settings.API_MAX_BODY_BYTES
        too_large = json_error_response(413, "payload_too_large", BODY_TOO_LARGE.format(limit=limit))
        declared = request.META.get("CONTENT_LENGTH")
        if declared:
            try:
                length = int(declared)
            except ValueError:
                return json_error_response(400, "malformed_request", "Content-Length is not a number.")
            return too_large if length > limit else None
        if "chunked" not in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            return None
        # A chunked body has no declared length, so Django would read it as empty: a write
        # would silently lose its body. Read it here, at most one byte past the limit, when
        # the server marks the input as terminated (gunicorn does); otherwise there is no
        # safe end to read to.
        if not request.META.get("wsgi.input_terminated"):
            return json_error_response(411, "length_required", LENGTH_REQUIRED)
        stream = request.META["wsgi.input"]
        chunks, size = [], 0
        while size <= limit:
            chunk = stream.read(min(64 * 1024, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return too_large
        body = b"".join(chunks)
        request.META["CONTENT_LENGTH"] = str(len(body))
        request._stream = LimitedStream(io.BytesIO(body), len(body))
        return None

    @staticmethod
    def _body_streamed(request):
        """A view reading its body as a stream: a chunked body is handed to it whole, to the
        end the server marks (gunicorn), without a length to trust; it enforces its own limit."""
        if request.META.get("CONTENT_LENGTH"):
            return None
        if "chunked" not in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            return None
        if not request.META.get("wsgi.input_terminated"):
            return json_error_response(411, "length_required", LENGTH_REQUIRED)
        request._stream = request.META["wsgi.input"]
        return None


class ReadReplicaMiddleware:
    """Marks a request eligible for replica reads in process_view, and pins writers after.

    Placed after the session and authentication middleware: the caller is identified by its
    Authorization header or its session's user, without a query (DRF authenticates only
    inside the view). Pinning happens when the request wrote (the router saw a write) or
    was a successful unsafe request (raw-SQL writes pass the router by), except a POST to
    a view declared read-only, which pins only when it wrote.
    """

    def __init__(self, get_response):
        if not replica_configured():
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request):
        reads, token = reads_begin()
        request._replica_reads = reads
        try:
            response = self.get_response(request)
        finally:
            reads_end(token)
        unsafe = request.method not in SAFE_METHODS and not reads.read_only
        if reads.wrote or (unsafe and response.status_code < 400):
            pin_key = principal_pin_key(request)
            if pin_key is not None:
                principal_pin(pin_key)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not view_reads_replica(view_func, request.method):
            return
        request._replica_reads.read_only = request.method not in SAFE_METHODS
        if not principal_pinned(principal_pin_key(request)) and replica_usable():
            request._replica_reads.use_replica = True
