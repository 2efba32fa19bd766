"""A Celery beat scheduler that sends only while it holds a PostgreSQL advisory lock.

Several hosts may each run `serve` (or `celery beat`) against one database; without this
every beat would send every periodic task. `LockedPersistentScheduler` takes a
session-level `pg_try_advisory_lock(BEAT_LOCK_KEY)` on a connection of its own to the
Django default database before it sends anything. The others stay on standby, say so once
in their log, and try again every `STANDBY_RETRY_SECONDS`; the lock is released when the
holder's connection drops (process killed, host gone, database restarted), so a standby
takes over within seconds.

Settings: `CELERY_BEAT_SCHEDULER = "core.lib.beat:LockedPersistentScheduler"`.
"""

import logging

import psycopg
from celery.beat import PersistentScheduler

logger = logging.getLogger(__name__)

# One lock per database (advisory locks are scoped to the database): "mem-beat" in ASCII,
# an arbitrary 64-bit key that no other code of this project takes.
BEAT_LOCK_KEY = int.from_bytes(b"mem-beat", "big")
# How often a standby asks for the lock: also the longest the schedule is left unattended
# after the holder died.
STANDBY_RETRY_SECONDS = 2.0
# The holder checks its connection before every send and at least this often, so a lock
# lost with its connection is noticed before the next send, not after a long sleep.
HOLDER_MAX_SLEEP_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 5


def lock_connection_params() -> dict:
    """psycopg.connect() arguments for the Django default database, without Django's cursor."""
    from django.db import connections

    params = connections["default"].get_connection_params()
    # Django's cursor class and adapters are for its own connections; this one runs two
    # fixed statements.
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


class LockedPersistentScheduler(PersistentScheduler):
    """PersistentScheduler that ticks only while this process holds the beat lock."""

    standby_retry_seconds = STANDBY_RETRY_SECONDS

    def __init__(self, *args, connection_params: dict | None = None, **kwargs):
        self._connection_params = connection_params
        self._lock_connection = None
        self._standby_logged = False
        super().__init__(*args, **kwargs)
        self.max_interval = min(self.max_interval, HOLDER_MAX_SLEEP_SECONDS)

    @property
    def holds_lock(self) -> bool:
        return self._lock_connection is not None

    def tick(self, *args, **kwargs):
        if not self._lock_ensure():
            return self.standby_retry_seconds
        return super().tick(*args, **kwargs)

    def _lock_ensure(self) -> bool:
        """True when this scheduler holds the lock now; tries to take it when it does not."""
        if self._lock_connection is not None:
            try:
                # A live session still holds its session-level lock; a dead one lost it.
                self._lock_connection.execute("SELECT 1")
                return True
            except psycopg.Error as exc:
                logger.warning("beat: lost the beat lock with its database connection (%s); standing by", exc)
                self._lock_release()
                self._standby_logged = True
        return self._lock_acquire()

    def _lock_acquire(self) -> bool:
        connection = None
        try:
            params = self._connection_params or lock_connection_params()
            connection = psycopg.connect(**params, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
            acquired = connection.execute("SELECT pg_try_advisory_lock(%s)", [BEAT_LOCK_KEY]).fetchone()[0]
        except psycopg.Error as exc:
            if connection is not None:
                connection.close()
            logger.warning("beat: cannot reach the database for the beat lock (%s); retrying", exc)
            return False
        if not acquired:
            connection.close()
            if not self._standby_logged:
                logger.info(
                    "beat: another beat holds the beat lock (key %s); standing by, retrying every %ss",
                    BEAT_LOCK_KEY,
                    self.standby_retry_seconds,
                )
                self._standby_logged = True
            return False
        self._lock_connection = connection
        self._standby_logged = False
        logger.info("beat: acquired the beat lock (key %s); sending periodic tasks", BEAT_LOCK_KEY)
        return True

    def _lock_release(self) -> None:
        connection, self._lock_connection = self._lock_connection, None
        if connection is not None:
            # Closing the session releases its advisory locks.
            connection.close()

    def close(self):
        try:
            super().close()
        finally:
            self._lock_release()
