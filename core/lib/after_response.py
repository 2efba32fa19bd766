"""Work a request leaves for after its response has been sent.

Some writes are the request's bookkeeping, not its answer: the per-day recall counters
(core.counters) are one upsert and one commit, ~0.3-0.4 ms of a ~7 ms search. Inside a
request, `after_response(fn)` queues `fn`; `core.middleware.AfterResponseMiddleware` runs the
queue when the server closes the response, which WSGI servers do after the last byte is
written (Django's test client does it before returning the response, so tests see the
writes at once). Outside a request (a task, a command, a thread the request started) `fn`
runs at once.

A queued function that raises is logged and does not stop the others; the client already
has its answer. Nothing that the answer depends on may be queued here.
"""

import contextvars
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_pending: contextvars.ContextVar[list | None] = contextvars.ContextVar("after_response", default=None)


def after_response(fn: Callable[[], None]) -> None:
    """Run `fn` after the current request's response is sent; at once outside a request."""
    pending = _pending.get()
    if pending is None:
        fn()
    else:
        pending.append(fn)


def after_response_queueing() -> bool:
    """Whether `after_response` queues (inside a request) rather than running at once."""
    return _pending.get() is not None


def after_response_collect() -> tuple[list, contextvars.Token]:
    """Start queueing for a request: (the queue, the token that `after_response_stop` takes)."""
    pending: list = []
    return pending, _pending.set(pending)


def after_response_stop(token: contextvars.Token) -> None:
    _pending.reset(token)


def after_response_run(pending: list) -> None:
    """Run what a request queued, in order, each failure logged. Anything these functions
    queue in turn runs at once: the request is over."""
    while pending:
        fn = pending.pop(0)
        try:
            fn()
        except Exception:
            logger.exception("Work queued for after the response failed")
