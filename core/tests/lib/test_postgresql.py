"""The database backend's health check (core.lib.postgresql): a persistent connection the
server ended is replaced before a request uses it; one the server has not ended is used
without the `SELECT 1` round trip while it was used recently."""

import time
from unittest import mock

from django.db import connection, connections
from django.test import SimpleTestCase, override_settings

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
