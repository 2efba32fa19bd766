"""Unexpected and database errors on /api/ answer the documented JSON body (issue 11 finding 3)."""

import json
import logging
import os
import subprocess
import sys
import time
from unittest import mock

import psycopg
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.db import DataError, InterfaceError, OperationalError, connection
from django.test import TransactionTestCase, override_settings

from core.apis import AgentDetailApi, AgentListApi
from core.errors import (
    DATABASE_TIMEOUT,
    RETRY_AFTER_SECONDS,
    SERVER_ERROR,
    SERVICE_UNAVAILABLE,
    VALUE_REFUSED,
)
from core.lib.postgresql import base as postgresql
from core.middleware import REQUEST_ID_HEADER, RequestIdLogFilter
from core.testing import MemoryTestCase, workspace_api_client


class ServerErrorTests(MemoryTestCase):
    def client_without_raise(self, **headers):
        client = self.api()
        client.raise_request_exception = False
        if headers:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.owner_key}", **headers)
        return client

    def test_unexpected_exception_is_json_500_with_a_logged_request_id(self):
        """Before, a debug page (DEBUG on) or Django's HTML 500 page."""
        with (
            mock.patch.object(AgentListApi, "selector", side_effect=RuntimeError("boom")),
            self.assertLogs("core.middleware", level="ERROR") as logs,
        ):
            response = self.client_without_raise().get("/api/v1/agents/")
        assert response.status_code == 500
        assert response["Content-Type"] == "application/json"
        error = response.json()["error"]
        request_id = response[REQUEST_ID_HEADER]
        assert error == {
            "code": "server_error",
            "message": SERVER_ERROR,
            "fields": {},
            "request_id": request_id,
        }
        assert b"boom" not in response.content
        [record] = logs.records
        assert request_id in record.getMessage()
        assert record.exc_info[0] is RuntimeError

    def test_a_sane_incoming_request_id_is_kept(self):
        with (
            mock.patch.object(AgentListApi, "selector", side_effect=RuntimeError("boom")),
            self.assertLogs("core.middleware"),
        ):
            response = self.client_without_raise(HTTP_X_REQUEST_ID="trace-42.a:b").get("/api/v1/agents/")
        assert response[REQUEST_ID_HEADER] == "trace-42.a:b"
        assert response.json()["error"]["request_id"] == "trace-42.a:b"

    def test_an_insane_incoming_request_id_is_replaced(self):
        for incoming in ("has space", "x" * 200, "<script>", "-leading-dash"):
            response = self.client_without_raise(HTTP_X_REQUEST_ID=incoming).get("/api/v1/agents/")
            assert response.status_code == 200
            assert response[REQUEST_ID_HEADER] != incoming
            assert len(response[REQUEST_ID_HEADER]) == 32

    def test_every_api_response_carries_a_request_id(self):
        responses = [
            self.api().get("/api/v1/agents/"),
            self.api().get("/api/v1/nothing-here/"),
            self.api("mem_bad_key").get("/api/v1/agents/"),
            self.api().post("/api/v1/agents/", {"slug": ""}, format="json"),
        ]
        assert [r.status_code for r in responses] == [200, 404, 401, 400]
        ids = {r[REQUEST_ID_HEADER] for r in responses}
        assert len(ids) == 4

    def test_log_lines_of_a_request_carry_its_id(self):
        """Django logs 4xx/5xx responses after the middleware returned: the id comes from the record."""
        with self.assertLogs("django.request", level="WARNING") as logs:
            response = self.api().get("/api/v1/nothing-here/")
        [record] = logs.records
        assert RequestIdLogFilter().filter(record)
        assert record.request_id == response[REQUEST_ID_HEADER]
        outside = logging.LogRecord("x", logging.INFO, __file__, 1, "outside a request", None, None)
        RequestIdLogFilter().filter(outside)
        assert outside.request_id == "-"

    def test_a_value_the_database_refuses_is_400(self):
        """The backstop for a limit a serializer missed: DataError and psycopg's DataError family."""
        errors = [
            DataError("value too long for type character varying(255)"),
            psycopg.errors.NumericValueOutOfRange("bigint out of range"),
            psycopg.errors.StringDataRightTruncation("value too long"),
            psycopg.errors.CharacterNotInRepertoire("invalid byte sequence"),
            psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"),
        ]
        for error in errors:
            with mock.patch.object(AgentDetailApi, "selector", side_effect=error):
                response = self.client_without_raise().get("/api/v1/agents/assistant/")
            assert response.status_code == 400, error
            assert response.json()["error"] == {"code": "invalid", "message": VALUE_REFUSED, "fields": {}}

    def test_a_request_past_a_database_limit_is_400_not_503(self):
        """An index row too large (SQLSTATE 54000) and its kin are OperationalErrors, but the
        request is what cannot be stored: retrying it, as a 503's Retry-After says, never helps."""
        wrapped = OperationalError("index row size 2720 exceeds btree version 4 maximum 2704")
        wrapped.__cause__ = psycopg.errors.ProgramLimitExceeded("index row size exceeds maximum")
        errors = [
            wrapped,
            psycopg.errors.ProgramLimitExceeded("index row requires 9000 bytes"),
            psycopg.errors.StatementTooComplex("stack depth limit exceeded"),
            psycopg.errors.TooManyColumns("target lists can have at most 1664 entries"),
            psycopg.errors.TooManyArguments("cannot pass more than 100 arguments to a function"),
        ]
        for error in errors:
            with mock.patch.object(AgentDetailApi, "selector", side_effect=error):
                response = self.client_without_raise().get("/api/v1/agents/assistant/")
            assert response.status_code == 400, error
            assert response.json()["error"] == {"code": "invalid", "message": VALUE_REFUSED, "fields": {}}
            assert "Retry-After" not in response

    def test_an_unreachable_database_is_503_with_retry_after(self):
        for error in (
            OperationalError("server closed the connection unexpectedly"),
            InterfaceError("connection already closed"),
            psycopg.OperationalError("connection failed"),
        ):
            with mock.patch.object(AgentDetailApi, "selector", side_effect=error):
                response = self.client_without_raise().get("/api/v1/agents/assistant/")
            assert response.status_code == 503, error
            assert response.json()["error"]["code"] == "service_unavailable"
            assert response.json()["error"]["message"] == SERVICE_UNAVAILABLE
            assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)

    def test_database_errors_on_the_schema_route_are_mapped_too(self):
        """Every view under /api/ (the OpenAPI document included) answers the same 503."""
        with mock.patch("drf_spectacular.views.SpectacularAPIView.get", side_effect=OperationalError("gone")):
            response = self.client_without_raise().get("/api/schema/")
        assert response.status_code == 503
        assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)


class MiddlewareFallbackTests(MemoryTestCase):
    def test_an_error_outside_drf_gets_the_same_bodies(self):
        """process_exception maps what reaches it the way the DRF handler does, with the request id."""
        from django.test import RequestFactory

        from core.middleware import RequestIdMiddleware

        middleware = RequestIdMiddleware(lambda request: None)
        request = RequestFactory().get("/api/v1/agents/")
        request.id = "abc"
        response = middleware.process_exception(request, OperationalError("gone"))
        assert (response.status_code, response["Retry-After"]) == (503, str(RETRY_AFTER_SECONDS))
        with self.assertLogs("core.middleware", level="ERROR"):
            response = middleware.process_exception(request, KeyError("x"))
        assert response.status_code == 500
        assert json.loads(response.content)["error"]["request_id"] == "abc"
        page = RequestFactory().get("/memories/")
        page.id = "abc"
        assert middleware.process_exception(page, KeyError("x")) is None


class FailingMiddlewareTests(MemoryTestCase):
    """A database failure outside any view (the session's save after the response is built)
    reaches `handler500`: it answers as a view's failure does, not with a bare 500."""

    def get(self, path, failure):
        client = self.api()
        client.raise_request_exception = False
        with mock.patch.object(SessionMiddleware, "process_response", side_effect=failure):
            return client.get(path)

    def test_the_api_gets_its_503_body(self):
        response = self.get("/api/v1/agents/", OperationalError("connection refused"))
        assert response.status_code == 503
        assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
        assert response.json()["error"]["code"] == "service_unavailable"

    def test_a_page_gets_the_503_page(self):
        response = self.get("/accounts/login/", OperationalError("connection refused"))
        assert response.status_code == 503
        assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
        assert SERVICE_UNAVAILABLE in response.content.decode()

    def test_any_other_failure_is_still_a_500(self):
        api = self.get("/api/v1/agents/", RuntimeError("a bug"))
        assert api.status_code == 500
        assert api.json()["error"]["code"] == "server_error"
        assert self.get("/accounts/login/", RuntimeError("a bug")).status_code == 500


class DebugOffTests(MemoryTestCase):
    def debug_of(self, settings_module: str, **env) -> str:
        """DEBUG as a fresh process with `env` imports `settings_module` (no database needed)."""
        environ = {k: v for k, v in os.environ.items() if k != "DJANGO_DEBUG"}
        environ.update(env, DJANGO_SETTINGS_MODULE=settings_module)
        code = "from django.conf import settings; print(settings.DEBUG)"
        result = subprocess.run(
            [sys.executable, "-c", code], env=environ, cwd=settings.BASE_DIR, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def test_development_settings_default_to_debug_off(self):
        """`serve` and scripts/run use the development settings: no debug pages unless asked for."""
        assert self.debug_of("memory_project.settings.development") == "False"
        assert self.debug_of("memory_project.settings.development", DJANGO_DEBUG="true") == "True"
        assert (
            self.debug_of(
                "memory_project.settings.production", DJANGO_DEBUG="true", DJANGO_SECRET_KEY="s" * 50
            )
            == "False"
        )

    def test_static_files_are_served_with_debug_off(self):
        """WhiteNoise serves the pages' assets and the API docs' assets without DEBUG."""
        assert settings.DEBUG is False
        for path in (
            "/static/memories/memories.css",
            "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
        ):
            response = self.client.get(path)
            assert response.status_code == 200, path
            assert b"".join(response.streaming_content)


@override_settings(DATABASE_REQUEST_STATEMENT_TIMEOUT_SECONDS=0.3, DATABASE_REQUEST_LOCK_TIMEOUT_SECONDS=0.3)
class RequestTimeLimitTests(TransactionTestCase):
    """A web process's statement and lock-wait limits (core.lib.postgresql) end a request
    stuck in the database with a 503 the client can retry, and leave its connection usable."""

    def setUp(self):
        self.workspace, self.agent, self.client = workspace_api_client()
        # The requests' connection is opened again, as a web process opens it.
        limits = mock.patch.object(postgresql, "_request_limits", True)
        limits.start()
        self.addCleanup(limits.stop)
        connection.close()
        self.addCleanup(connection.close)

    def assert_timed_out(self, response):
        assert response.status_code == 503, response.content
        assert response.json()["error"] == {
            "code": "database_timeout",
            "message": DATABASE_TIMEOUT,
            "fields": {},
        }
        assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)

    def test_a_statement_past_the_limit(self):
        def runaway(*args, **kwargs):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(5)")

        with mock.patch.object(AgentDetailApi, "selector", side_effect=runaway):
            started = time.monotonic()
            response = self.client.get("/api/v1/agents/assistant/")
        assert time.monotonic() - started < 3
        self.assert_timed_out(response)
        assert self.client.get("/api/v1/agents/assistant/").json()["slug"] == "assistant"

    def test_a_lock_held_past_the_limit(self):
        """A rename waits on the agent's row, which another session holds: the lock wait ends,
        nothing is written, and the rename goes through once the row is free."""
        holder = connection.copy()
        self.addCleanup(holder.close)
        with mock.patch.object(postgresql, "_request_limits", False):
            holder.connect()
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("SELECT id FROM core_agent WHERE id = %s FOR UPDATE", [self.agent.pk])
        response = self.client.patch("/api/v1/agents/assistant/", {"name": "Renamed"}, format="json")
        self.assert_timed_out(response)
        holder.rollback()
        self.agent.refresh_from_db()
        assert self.agent.name != "Renamed"
        response = self.client.patch("/api/v1/agents/assistant/", {"name": "Renamed"}, format="json")
        assert response.status_code == 200
        self.agent.refresh_from_db()
        assert self.agent.name == "Renamed"
