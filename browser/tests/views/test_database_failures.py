"""The memory browser's answer when the database is down or out of time: a 503 page the
operator can retry, not Django's 500."""

from unittest import mock

import psycopg
from django.db import OperationalError

from browser.tests.base import BrowserTestCase
from core.errors import DATABASE_TIMEOUT, RETRY_AFTER_SECONDS, SERVICE_UNAVAILABLE


def _timed_out() -> OperationalError:
    error = OperationalError("canceling statement due to statement timeout")
    error.__cause__ = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    return error


class DatabaseFailurePageTests(BrowserTestCase):
    def setUp(self):
        super().setUp()
        self.login(self.owner)
        self.client.raise_request_exception = False

    def get_overview(self, failure, **headers):
        with mock.patch("browser.views.overview.overview_get", side_effect=failure):
            return self.client.get(self.url("memories:overview"), **headers)

    def assert_unavailable(self, response, message):
        assert response.status_code == 503
        assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
        assert response["Content-Type"].startswith("text/html")
        assert message in response.content.decode()

    def test_a_database_that_cannot_be_reached(self):
        response = self.get_overview(OperationalError("connection refused"))
        self.assert_unavailable(response, SERVICE_UNAVAILABLE)

    def test_a_statement_past_the_request_limit(self):
        self.assert_unavailable(self.get_overview(_timed_out()), DATABASE_TIMEOUT)

    def test_an_htmx_request_gets_the_503_too(self):
        """The page script shows its own message for a 503 (static/memories/memories.js)."""
        response = self.get_overview(OperationalError("connection refused"), HTTP_HX_REQUEST="true")
        self.assert_unavailable(response, SERVICE_UNAVAILABLE)

    def test_the_page_is_served_again_once_the_database_answers(self):
        self.get_overview(OperationalError("connection refused"))
        assert self.client.get(self.url("memories:overview")).status_code == 200

    def test_any_other_failure_is_still_a_500(self):
        response = self.get_overview(RuntimeError("a bug"))
        assert response.status_code == 500
