"""Read replica: the router, the per-request choice of server, and the read-your-writes pin.

Reads go to the "replica" alias (DATABASE_REPLICA_URL) only while `ReadReplicaMiddleware`
has marked the current request as eligible: a GET or HEAD to a view that opted in
(`read_replica = True` on a DRF view class, `@read_replica` on a function view), or a POST
to an opted-in DRF view that declares `read_only_safe = True` (search endpoints), whose
principal did not write within DATABASE_REPLICA_PIN_SECONDS, while the replica answers and
lags less than DATABASE_REPLICA_MAX_LAG_SECONDS. Everything else reads the primary: writes,
reads inside `transaction.atomic`, reads after the request itself wrote, Celery tasks,
management commands, and threads the request starts: the choice lives in a contextvar, and
a thread of a pool (core.lib.side_reads: the context's parts, a search's BM25) does not
inherit it, so its reads stay on the primary unless the request names the connection (a
search sends its BM25 to the one it reads, core.ranking).

Raw SQL follows the same choice only through `read_connection`: `django.db.connection` is
the primary's whatever the router would pick.
"""

import contextvars
import hashlib
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, router

logger = logging.getLogger(__name__)

REPLICA_DB_ALIAS = "replica"
SAFE_METHODS = ("GET", "HEAD")
PIN_CACHE_PREFIX = "replica-pin:"

# Rows that decide who may do what are read on the primary even in an eligible request: a
# key created a moment ago must authenticate, and a revoked key or membership must stop
# working at once, not once the replica has replayed the change.
PRIMARY_ONLY_MODELS = frozenset({"core.apikey", "core.membership", "auth.user", "sessions.session"})

# A standby whose received WAL is all replayed has no lag; otherwise the lag is the age of
# the last transaction it replayed. A server that is not a standby (a replica fed by other
# means) counts as current.
_LAG_SQL = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
    ELSE EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp())
END
"""


@dataclass
class RequestReads:
    """What the router needs to know about the request being served."""

    use_replica: bool = False
    wrote: bool = False
    # A POST to a view declared read-only: it pins its caller only if it did write.
    read_only: bool = False


_request_reads: contextvars.ContextVar[RequestReads | None] = contextvars.ContextVar(
    "request_reads", default=None
)


def reads_begin() -> tuple[RequestReads, contextvars.Token]:
    reads = RequestReads()
    return reads, _request_reads.set(reads)


def reads_end(token: contextvars.Token) -> None:
    _request_reads.reset(token)


def replica_configured() -> bool:
    return REPLICA_DB_ALIAS in connections


def read_connection(model):
    """The connection `model`'s rows are read from at this point of the request: the routers'
    choice, the replica where the ORM would read it (the primary for a `model` of None). Raw
    SQL that only reads goes through this: `django.db.connection` is always the primary's,
    whatever the request may read."""
    return connections[DEFAULT_DB_ALIAS if model is None else router.db_for_read(model)]


def read_replica(view_func):
    """Let GET and HEAD requests to this function view read from the replica when safe.

    The attribute survives decorators applied on top (`functools.wraps` copies it).
    """
    view_func.read_replica = True
    return view_func


def view_reads_replica(view_func, method: str = "GET") -> bool:
    """Whether a `method` request to this view may read from the replica.

    GET and HEAD of a view that opted in; also POST when the DRF view declares, with
    `read_only_safe = True`, that its POST only reads (search endpoints whose query does
    not fit in a URL; read-only keys rely on the same declaration).
    """
    # DRF's as_view() keeps the class on the function; Django's keeps it as view_class.
    view_class = getattr(view_func, "cls", None) or getattr(view_func, "view_class", None)
    opted_in = getattr(view_class, "read_replica", False) or getattr(view_func, "read_replica", False)
    if opted_in is not True:
        return False
    if method in SAFE_METHODS:
        return True
    return method == "POST" and getattr(view_class, "read_only_safe", False) is True


def principal_pin_key(request) -> str | None:
    """A cache key for the caller: its API key (hashed: no secret in the cache) or its user."""
    authorization = request.META.get("HTTP_AUTHORIZATION", "").split()
    if authorization:
        digest = hashlib.sha256(authorization[-1].encode("utf-8", "surrogatepass")).hexdigest()
        return f"{PIN_CACHE_PREFIX}key:{digest}"
    session = getattr(request, "session", None)
    user_id = session.get(SESSION_KEY) if session is not None else None
    if user_id:
        return f"{PIN_CACHE_PREFIX}user:{user_id}"
    return None


def principal_pin(pin_key: str) -> None:
    """Send the caller's reads to the primary for DATABASE_REPLICA_PIN_SECONDS.

    The mark lives in the Django cache, which is the shared Valkey in production, so every
    web process (and host, when CACHE_URL points at one server) sees it.
    """
    try:
        cache.set(pin_key, 1, timeout=settings.DATABASE_REPLICA_PIN_SECONDS)
    except Exception:
        # Without the mark the caller's next reads may miss this write for up to the
        # replica's lag; the cache being down usually also fails the lookup below, which
        # then reads the primary.
        logger.warning("Could not pin %s to the primary database", pin_key, exc_info=True)


def principal_pinned(pin_key: str | None) -> bool:
    if pin_key is None:
        return False
    try:
        return cache.get(pin_key) is not None
    except Exception:
        # Unknown is treated as pinned: the primary is always correct.
        return True


_health = {"checked_at": float("-inf"), "usable": False}


def replica_usable() -> bool:
    """Whether the replica answers and lags less than DATABASE_REPLICA_MAX_LAG_SECONDS.

    Checked at most once per DATABASE_REPLICA_CHECK_SECONDS per process; between checks the
    last answer stands, so a replica that dies fails at most that window's replica reads
    (503 with Retry-After, core.errors) before reads fall back to the primary.
    """
    now = time.monotonic()
    if now - _health["checked_at"] < settings.DATABASE_REPLICA_CHECK_SECONDS:
        return _health["usable"]
    connection = connections[REPLICA_DB_ALIAS]
    # Logged when the answer changes (and at the first check), not once a second.
    changed = _health["usable"] or _health["checked_at"] == float("-inf")
    try:
        with connection.cursor() as cursor:
            cursor.execute(_LAG_SQL)
            (lag,) = cursor.fetchone()
        usable = lag is not None and lag <= settings.DATABASE_REPLICA_MAX_LAG_SECONDS
        if not usable and changed:
            logger.warning("Read replica lags %s s: reading the primary", lag)
    except DatabaseError:
        if changed:
            logger.warning("Read replica unreachable: reading the primary", exc_info=True)
        connection.close()
        usable = False
    if usable and not _health["usable"]:
        logger.info("Read replica in use")
    _health.update(checked_at=time.monotonic(), usable=usable)
    return usable


def replica_health_forget() -> None:
    """Check the replica again on the next eligible request (tests, after a failover)."""
    _health.update(checked_at=float("-inf"), usable=False)


class ReplicaRouter:
    """Reads of an eligible request to the replica, everything else to the primary.

    db_for_read never returns None: Django would then fall back to the hinted instance's
    database, and an object loaded from the replica would pull its relations from there
    even in an atomic block.
    """

    def db_for_read(self, model, **hints):
        reads = _request_reads.get()
        if (
            reads is None
            or not reads.use_replica
            or reads.wrote
            or model._meta.label_lower in PRIMARY_ONLY_MODELS
            or connections[DEFAULT_DB_ALIAS].in_atomic_block
        ):
            return DEFAULT_DB_ALIAS
        return REPLICA_DB_ALIAS

    def db_for_write(self, model, **hints):
        reads = _request_reads.get()
        # The rest of the request reads what it wrote, and the pin covers the next ones.
        # Rows only ever read on the primary need neither: this keeps the throttled
        # last_used_at touch of an API key from sending a plain GET to the primary.
        if reads is not None and model._meta.label_lower not in PRIMARY_ONLY_MODELS:
            reads.wrote = True
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        # Both aliases hold the same rows.
        return True

    def allow_migrate(self, db, app_label, **hints):
        # A standby is read-only; it receives the schema from the primary's WAL.
        return db != REPLICA_DB_ALIAS
