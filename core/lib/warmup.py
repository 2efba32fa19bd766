"""Per-process warm-up: load at start what a process's first request would load, and say when it is done.

A web process's first recall or search used to spend 5-7 s loading the local embedding
model; the first token count, database round trip and URL resolution add their own first-use
costs. `warmup_start()` pays them in a background thread when the process starts (gunicorn's
`post_worker_init`, Celery's `worker_process_init`), so the process keeps answering probes
meanwhile, and `warmup_status()` tells `/readyz` whether it is done.

State is per process (keyed by pid): a forked child starts again from "not_started".
"""

import logging
import os
import threading
import time

logger = logging.getLogger(__name__)

NOT_STARTED = "not_started"
WARMING = "warming"
READY = "ready"
FAILED = "failed"

_WARM_UP_QUERY = "what did we decide about the release date?"

_lock = threading.Lock()
_state: dict = {"pid": None, "status": NOT_STARTED}


def warmup_status() -> dict:
    """This process's warm-up: `status` (not_started, warming, ready, failed) and details."""
    with _lock:
        if _state["pid"] != os.getpid():
            return {"status": NOT_STARTED}
        state = dict(_state)
    state.pop("pid")
    if state["status"] == WARMING:
        state["seconds"] = round(time.monotonic() - state.pop("started"), 1)
    else:
        state.pop("started", None)
    return state


def warmup_start(*, background: bool = True, freeze: bool = False) -> threading.Thread | None:
    """Warm this process once; a second call in the same process does nothing.

    In the background (the default) it returns the thread; in the foreground it returns
    once the warm-up has finished or failed. A failure is logged and reported by
    `warmup_status()`, never raised: the process serves cold instead of not at all.

    With `freeze` (web processes), the objects alive once warm (modules, the model, URL
    resolvers, templates) are moved out of the garbage collector's generations
    (`gc.freeze()`): a full collection then walks only what requests made. Measured by
    bench.browser_context_preview at 100,000 rows per tier, full collections of ~125 ms every
    ~5 requests put the page's p95 at 183-243 ms; frozen, 17-68 ms each and p95 99-151 ms.
    """
    with _lock:
        if _state["pid"] == os.getpid():
            return None
        _state.clear()
        _state.update(pid=os.getpid(), status=WARMING, started=time.monotonic())
    if not background:
        _warm(freeze=freeze)
        return None
    thread = threading.Thread(target=_warm_in_thread, args=(freeze,), name="warmup", daemon=True)
    thread.start()
    return thread


def _warm(*, freeze: bool = False) -> None:
    started = time.monotonic()
    steps: dict[str, float] = {}
    result: dict = {}
    try:
        for name, step in (
            ("urls", _urls),
            ("database", _database),
            ("tokens", _tokens),
            ("embeddings", _embeddings),
        ):
            step_started = time.perf_counter()
            outcome = step()
            steps[name] = round((time.perf_counter() - step_started) * 1000, 1)
            if outcome:
                result[name] = outcome
    except Exception as exc:
        logger.exception("Warm-up failed after %s", steps)
        _finish(status=FAILED, error=f"{type(exc).__name__}: {exc}"[:300], steps_ms=steps)
    else:
        logger.info("Warm-up done in %.1f s: %s", time.monotonic() - started, steps)
        if freeze:
            import gc

            gc.collect()
            gc.freeze()
        _finish(status=READY, steps_ms=steps, **result)


def _warm_in_thread(freeze: bool = False) -> None:
    try:
        _warm(freeze=freeze)
    finally:
        from django.db import connections

        # This thread's own connections: request threads open theirs.
        connections.close_all()


def _finish(**fields) -> None:
    with _lock:
        if _state.get("pid") == os.getpid():
            started = _state.get("started")
            _state.update(fields, seconds=round(time.monotonic() - started, 1) if started else None)


def _urls() -> None:
    """Import every URLconf (and with it every view, serializer and selector module)."""
    from django.urls import reverse

    reverse("readyz")


def _database() -> dict | None:
    """A key lookup as authentication makes it: connection, type adapters, query compilation.

    A database that is down is not a failed warm-up: /readyz reports it in its own check, and
    this process connects once it is back.
    """
    from django.db import DatabaseError

    from core.models import ApiKey

    try:
        ApiKey.objects.filter(prefix="warmup").select_related("workspace").first()
    except DatabaseError as exc:
        return {"error": str(exc)[:200]}
    return None


def _tokens() -> None:
    from core.lib.tokens import count_tokens

    count_tokens(_WARM_UP_QUERY)


def _embeddings() -> dict | None:
    """One query embedding with the default provider; an endpoint that is down is only reported.

    The local model loads in the runtime EMBEDDING_RUNTIME names (an ONNX Runtime session or
    OpenVINO's compiled graphs, exported first if the file is missing, or torch), so a process
    on ONNX never imports torch.
    """
    from core.embeddings import embedding_warm

    return embedding_warm(_WARM_UP_QUERY)
