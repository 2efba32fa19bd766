"""Django's PostgreSQL backend, with a health check that costs no round trip when it can,
and time limits on the statements and lock waits of a process that serves requests.

With CONN_HEALTH_CHECKS, Django sends `SELECT 1` on a persistent connection before the
first query of every request: one more round trip for each request, about 7% of a search's
time in the web process (docs/speed.md). The check exists for connections the server has
dropped while they sat idle: a restart, `pg_terminate_backend`, `idle_session_timeout`. In
each case the server (or, when the backend process died, its kernel) ends the connection
with an error message or a FIN, which leaves the idle socket readable. An idle connection
whose socket has nothing to read has not been dropped by the server, so the request goes
ahead without the round trip.

The `SELECT 1` is still sent when the socket has something to read (a termination, a
notification, a TLS record: whatever it is, the full check decides), when the socket cannot
be polled, and when the connection has been idle longer than
DATABASE_HEALTH_CHECK_IDLE_SECONDS: a peer that vanished without a FIN (a host powered off,
a network cut) is only found by talking to it, and a connection left that long is on a
quiet process, where the round trip costs nobody a wait.
"""

import select
import time

from django.conf import settings
from django.db.backends.postgresql import base


def socket_readable(connection) -> bool | None:
    """Whether the psycopg `connection`'s socket has something to read now (no wait); None
    when it cannot be told (no socket, the poll failed)."""
    try:
        fd = connection.pgconn.socket
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError, base.Database.Error):
        return None


# Whether this process serves HTTP requests; set once, by the WSGI and ASGI entry points and
# the MCP server.
_request_limits = False


def request_limits_apply() -> None:
    """Limit the statements and lock waits of the connections this process opens from now on
    (memory_project.wsgi and .asgi, and `manage.py mcp_server`, before any request)."""
    global _request_limits
    _request_limits = True


def request_limits_options() -> str:
    """libpq `options` setting the request limits (empty when both are off)."""
    options = []
    for name, seconds in (
        ("statement_timeout", settings.DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS),
        ("lock_timeout", settings.DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS),
    ):
        if seconds > 0:
            options.append(f"-c {name}={max(1, round(seconds * 1000))}")
    return " ".join(options)


class DatabaseWrapper(base.DatabaseWrapper):
    # When the last request (or task) that used the connection ended, in monotonic seconds.
    idle_since: float | None = None

    def get_connection_params(self):
        params = super().get_connection_params()
        limits = request_limits_options() if _request_limits else ""
        if limits:
            # After the URL's own `options`: a limit set there too yields to the setting.
            params["options"] = f"{params.get('options', '')} {limits}".strip()
        return params

    def connect(self):
        super().connect()
        self.idle_since = None

    def close_if_unusable_or_obsolete(self):
        # Called as each request starts and ends. The check (or a new connection) marks the
        # health check done, so a request that used the connection ends with it done; one
        # that did not leaves `idle_since` at the last one that did.
        used = self.health_check_done
        super().close_if_unusable_or_obsolete()
        if used and self.connection is not None:
            self.idle_since = time.monotonic()

    def close_if_health_check_failed(self):
        if (
            self.connection is not None
            and self.health_check_enabled
            and not self.health_check_done
            and not self.pool
            and self.idle_since is not None
            and time.monotonic() - self.idle_since < settings.DATABASE_HEALTH_CHECK_IDLE_SECONDS
            and socket_readable(self.connection) is False
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()
