"""A refused write of a /memories form shows its reason in the page, over htmx too.

htmx 2 swaps no 4xx response and this project sets no `htmx.config.responseHandling`: a form
re-rendered with its errors at 400 or 409 never reached the page, and the operator saw only
the script's "Something went wrong (400)" toast above a form that kept its input with no reason.
Each refusal below answers htmx with a 200 holding the bound form's errors (or an inline
`role="alert" data-refusal="<code>"`), and a plain form post with the refusal's own status
(browser.lib.rendering.refused)."""

import tempfile

from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpResponse
from django.test import RequestFactory
from django_htmx.middleware import HtmxDetails

from browser.lib.rendering import refused
from browser.tests.base import BrowserTestCase
from browser.views.retention import PERSON_UNKNOWN
from identities.models import MemoryUser
from identities.tests.factories import MemoryUserFactory
from portability.models import ImportJob
from reflection.models import ReflectionRun
from retention.models import RetentionRule, RetentionRun
from webhooks.models import WebhookSubscription
from webhooks.services.subscriptions import URL_SCHEME


def refusal_of(body: str) -> str:
    """The `data-refusal` code of the inline error, or "" when there is none."""
    marker = 'role="alert" data-refusal="'
    return body.split(marker, 1)[1].split('"', 1)[0] if marker in body else ""


class RefusedHelperTests(BrowserTestCase):
    def request(self, **headers):
        request = RequestFactory().post("/", **headers)
        request.htmx = HtmxDetails(request)
        return request

    def test_htmx_gets_a_swappable_200_and_a_plain_post_the_refusals_status(self):
        htmx = refused(self.request(HTTP_HX_REQUEST="true"), HttpResponse("errors"), status=409)
        plain = refused(self.request(), HttpResponse("errors"), status=409)
        assert (htmx.status_code, plain.status_code) == (200, 409)
        assert htmx.content == plain.content == b"errors"


class FormRefusalTests(BrowserTestCase):
    """Every /memories form posted with hx-post whose refusal re-renders the page."""

    def setUp(self):
        self.login(self.owner)

    def both(self, url, data, **files):
        """The htmx answer and the plain form post's answer to the same refused input."""
        htmx = self.client.post(url, {**data, **files}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="main")
        for upload in files.values():
            upload.seek(0)
        plain = self.client.post(url, {**data, **files})
        return htmx, plain

    def assert_shown(self, response, text: str):
        body = response.content.decode()
        assert response.status_code == 200, response.status_code
        assert "<html" not in body, "htmx gets the partial, not the page"
        assert 'role="alert"' in body and text in body, text

    def test_an_invalid_retention_rule_shows_its_field_error(self):
        url = self.url("memories:retention-rule-save")
        htmx, plain = self.both(url, {"tier": "episodes", "max_age_days": "0"})
        self.assert_shown(htmx, "greater than or equal to 1")
        assert plain.status_code == 400 and b"greater than or equal to 1" in plain.content
        assert not RetentionRule.objects.exists()

    def test_a_retention_rule_for_an_unknown_agent_shows_its_field_error(self):
        htmx, plain = self.both(
            self.url("memories:retention-rule-save"),
            {"tier": "episodes", "max_age_days": "3", "agent": "nobody"},
        )
        self.assert_shown(htmx, "nobody")
        assert plain.status_code == 400
        assert not RetentionRule.objects.exists()

    def test_a_retention_run_while_one_runs_says_so_in_place(self):
        RetentionRun.objects.create(workspace=self.workspace)
        htmx, plain = self.both(self.url("memories:retention-run"), {})
        self.assert_shown(htmx, "already running")
        assert refusal_of(htmx.content.decode()) == "retention_running"
        assert "already running" in htmx["HX-Trigger"]
        assert plain.status_code == 409 and refusal_of(plain.content.decode()) == "retention_running"
        assert RetentionRun.objects.count() == 1

    def test_a_legal_hold_on_an_unknown_person_shows_its_field_error(self):
        htmx, plain = self.both(
            self.url("memories:legal-hold-place"), {"person": "nobody", "reason": "Case 7"}
        )
        self.assert_shown(htmx, PERSON_UNKNOWN)
        assert plain.status_code == 400 and PERSON_UNKNOWN.encode() in plain.content
        # The reason typed is kept for the corrected attempt; the person is not echoed back.
        assert 'value="Case 7"' in htmx.content.decode()

    def test_a_legal_hold_without_a_reason_shows_its_field_error(self):
        ada = MemoryUserFactory(workspace=self.workspace, canonical_id="telegram:1001")
        htmx, plain = self.both(self.url("memories:legal-hold-place"), {"person": "telegram:1001"})
        self.assert_shown(htmx, "This field is required.")
        assert plain.status_code == 400
        assert MemoryUser.objects.get(pk=ada.pk).legal_hold_at is None

    def test_a_refused_legal_hold_release_on_the_retention_tab_keeps_its_statuses(self):
        ada = MemoryUserFactory(workspace=self.workspace)
        url = self.url("memories:legal-hold-release", memory_user_id=ada.pk)
        htmx, plain = self.both(url, {"placed_on": "not-a-uuid"})
        self.assert_shown(htmx, "valid UUID")
        assert refusal_of(htmx.content.decode()) == refusal_of(plain.content.decode()) == "invalid"
        assert plain.status_code == 400

    def test_an_invalid_webhook_shows_its_field_error(self):
        htmx, plain = self.both(self.url("memories:webhook-create"), {"url": "ftp://x.example/h"})
        self.assert_shown(htmx, URL_SCHEME)
        assert 'value="ftp://x.example/h"' in htmx.content.decode()
        assert plain.status_code == 400 and URL_SCHEME.encode() in plain.content
        assert not WebhookSubscription.objects.exists()

    def test_a_webhook_for_an_unknown_event_shows_its_field_error(self):
        htmx, plain = self.both(
            self.url("memories:webhook-create"), {"url": "https://x.example/h", "events": ["fact.exploded"]}
        )
        self.assert_shown(htmx, "fact.exploded")
        assert plain.status_code == 400
        assert not WebhookSubscription.objects.exists()

    def test_a_reflection_for_an_unknown_agent_shows_its_field_error(self):
        htmx, plain = self.both(self.url("memories:reflection-start"), {"agent": "nobody"})
        self.assert_shown(htmx, "Select a valid choice.")
        assert plain.status_code == 400
        assert not ReflectionRun.objects.exists()

    def test_an_import_without_a_file_shows_its_field_error_and_a_plain_post_a_400(self):
        with self.settings(PORTABILITY_IMPORT_DIR=self.enterContext(tempfile.TemporaryDirectory())):
            htmx, plain = self.both(self.url("memories:portability-import"), {"dry_run": "on"})
            empty = SimpleUploadedFile("empty.jsonl", b"")
            htmx_empty, plain_empty = self.both(self.url("memories:portability-import"), {}, file=empty)
        self.assert_shown(htmx, "This field is required.")
        assert plain.status_code == 400
        self.assert_shown(htmx_empty, "The submitted file is empty.")
        assert plain_empty.status_code == 400
        assert not ImportJob.objects.exists()

    def test_an_export_for_an_unknown_person_is_still_a_400_page(self):
        """The export form is a plain GET (a download): no htmx request reaches it."""
        response = self.client.get(self.url("memories:portability-export"), {"person": "telegram:nobody"})
        assert response.status_code == 400 and b"No person with this id" in response.content
