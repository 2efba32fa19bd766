"""The database backend's health check (core.lib.postgresql): a persistent connection the
server ended is replaced before a request uses it; one the server has not ended is used
without the `SELECT 1` round trip while it was used recently."""

import os
import subprocess
import sys
import time
from unittest import mock

from django.conf import settings
from django.db import connection, connections
from django.test import SimpleTestCase, override_settings

from core.lib.postgresql import base as postgresql
from core.lib.postgresql.base import DatabaseWrapper, socket_readable


def _checks(wrapper):
    """`is_usable` (the `SELECT 1` round trip) of `wrapper`, counted."""
    return mock.patch.object(wrapper, "is_usable", wraps=wrapper.is_usable)


class HealthCheckTests(SimpleTestCase):
    # Each test opens connections of its own, outside any test transaction.
    databases = {"default"}

    def _wrapper(self) -> DatabaseWrapper:
        settings_dict = {**connection.settings_dict, "CONN_MAX_AGE": 600, "CONN_HEALTH_CHECKS": True}
        wrapper = DatabaseWrapper(settings_dict, alias=connection.alias)
        self.addCleanup(wrapper.close)
        return wrapper

    def _request(self, wrapper, sql="SELECT pg_backend_pid()"):
        """What a request does with the connection: the checks Django runs as it starts and
        ends (`close_old_connections`), and one statement between them (None: no statement)."""
        wrapper.close_if_unusable_or_obsolete()
        row = None
        if sql is not None:
            with wrapper.cursor() as cursor:
                cursor.execute(sql)
                row = cursor.fetchone() if cursor.description else None
        wrapper.close_if_unusable_or_obsolete()
        return row[0] if row else None

    def _terminate(self, pid: int) -> None:
        other = self._wrapper()
        with other.cursor() as cursor:
            # Waits (up to 10 s) until the backend has exited.
            cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
            assert cursor.fetchone()[0]

    def _wait_readable(self, wrapper) -> None:
        deadline = time.monotonic() + 10
        while not socket_readable(wrapper.connection):
            assert time.monotonic() < deadline, "the ended connection's socket never became readable"
            time.sleep(0.01)

    def test_a_recently_used_connection_is_used_without_a_round_trip(self):
        wrapper = self._wrapper()
        first = self._request(wrapper)
        with _checks(wrapper) as is_usable:
            again = [self._request(wrapper) for _ in range(3)]
        assert again == [first] * 3
        is_usable.assert_not_called()

    def test_a_connection_the_server_ended_is_replaced_before_the_request_uses_it(self):
        wrapper = self._wrapper()
        first = self._request(wrapper)
        self._terminate(first)
        self._wait_readable(wrapper)
        with _checks(wrapper) as is_usable:
            second = self._request(wrapper)
        assert second is not None and second != first
        is_usable.assert_called_once()
        # The new connection is used again without a check.
        with _checks(wrapper) as is_usable:
            assert self._request(wrapper) == second
        is_usable.assert_not_called()

    def test_a_readable_socket_of_a_live_connection_is_checked_and_kept(self):
        wrapper = self._wrapper()
        self._request(wrapper, "LISTEN health_check_probe")
        pid = self._request(wrapper)
        other = self._wrapper()
        with other.cursor() as cursor:
            cursor.execute("NOTIFY health_check_probe")
        self._wait_readable(wrapper)
        with _checks(wrapper) as is_usable:
            assert self._request(wrapper) == pid
        is_usable.assert_called_once()

    def test_a_connection_idle_past_the_limit_gets_the_round_trip(self):
        wrapper = self._wrapper()
        pid = self._request(wrapper)
        with (
            override_settings(DATABASE_HEALTH_CHECK_IDLE_SECONDS=0),
            _checks(wrapper) as is_usable,
        ):
            assert self._request(wrapper) == pid
        is_usable.assert_called_once()

    def test_requests_that_do_not_use_the_connection_do_not_make_it_recent(self):
        wrapper = self._wrapper()
        pid = self._request(wrapper)
        with override_settings(DATABASE_HEALTH_CHECK_IDLE_SECONDS=0.2):
            time.sleep(0.25)
            self._request(wrapper, sql=None)
            with _checks(wrapper) as is_usable:
                assert self._request(wrapper) == pid
        is_usable.assert_called_once()

    def test_without_health_checks_nothing_is_checked(self):
        wrapper = self._wrapper()
        wrapper.settings_dict["CONN_HEALTH_CHECKS"] = False
        pid = self._request(wrapper)
        with (
            override_settings(DATABASE_HEALTH_CHECK_IDLE_SECONDS=0),
            _checks(wrapper) as is_usable,
        ):
            assert self._request(wrapper) == pid
        is_usable.assert_not_called()

    def test_the_project_uses_this_backend(self):
        assert isinstance(connections["default"], DatabaseWrapper)


class RequestLimitsTests(SimpleTestCase):
    """A web process's connections carry statement and lock-wait limits; others carry none."""

    databases = {"default"}

    def _show(self, wrapper) -> tuple[str, str, str]:
        self.addCleanup(wrapper.close)
        with wrapper.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
                " current_setting('application_name')"
            )
            return cursor.fetchone()

    def _wrapper(self, **options) -> DatabaseWrapper:
        settings_dict = {
            **connection.settings_dict,
            "OPTIONS": {**connection.settings_dict["OPTIONS"], **options},
        }
        return DatabaseWrapper(settings_dict, alias=connection.alias)

    @override_settings(
        DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS=30, DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS=2.5
    )
    def test_a_web_process_connects_with_the_limits(self):
        with mock.patch.object(postgresql, "_request_limits", True):
            statement, lock, _ = self._show(self._wrapper())
        assert (statement, lock) == ("30s", "2500ms")

    @override_settings(
        DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS=30, DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS=10
    )
    def test_the_urls_own_options_are_kept(self):
        with mock.patch.object(postgresql, "_request_limits", True):
            row = self._show(self._wrapper(options="-c application_name=from-the-url"))
        assert row == ("30s", "10s", "from-the-url")

    @override_settings(DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS=0, DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS=0)
    def test_zero_sets_no_limit(self):
        with mock.patch.object(postgresql, "_request_limits", True):
            statement, lock, _ = self._show(self._wrapper())
        assert (statement, lock) == ("0", "0")

    def test_other_processes_have_no_limit(self):
        statement, lock, _ = self._show(self._wrapper())
        assert (statement, lock) == ("0", "0")

    def test_the_wsgi_and_asgi_entry_points_apply_them_and_a_command_does_not(self):
        """In real processes: the WSGI and ASGI applications' connections are limited (the
        defaults, 30 s and 10 s); a management command's are not (the MCP server, which
        serves requests, applies them itself: runtime/tests/test_mcp_server.py)."""
        params = connection.settings_dict
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memory_project.settings.test",
            "DATABASE_URL": f"postgresql://{params['USER']}@/{params['NAME']}?host={params['HOST']}",
        }
        show = (
            "from django.db import connection\n"
            "with connection.cursor() as c:\n"
            "    c.execute(\"SELECT current_setting('statement_timeout') || ' ' ||\"\n"
            "              \" current_setting('lock_timeout')\")\n"
            "    print(c.fetchone()[0])\n"
        )

        def run(*args: str):
            return subprocess.run(
                [sys.executable, *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                cwd=settings.BASE_DIR,
            )

        web = run("-c", "import memory_project.wsgi\n" + show)
        asgi = run("-c", "import memory_project.asgi\n" + show)
        command = run("manage.py", "shell", "-c", show)
        assert web.stdout.strip().splitlines()[-1] == "30s 10s", web.stderr
        assert asgi.stdout.strip().splitlines()[-1] == "30s 10s", asgi.stderr
        assert command.stdout.strip().splitlines()[-1] == "0 0", command.stderr
