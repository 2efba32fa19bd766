"""End to end: a refused form shows its field errors in the page over htmx.

Before, the view answered 400, htmx 2 swapped nothing, and the operator saw only the toast
"Something went wrong (400)" above a form that kept its input with no reason given."""

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from core.models import Membership
from core.services import operator_create, workspace_create
from core.testing import PASSWORD
from webhooks.models import WebhookSubscription
from webhooks.services.subscriptions import URL_SCHEME

pytestmark = pytest.mark.browser


class RefusedFormBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        operator_create(
            workspace=self.workspace, username="admin", password=PASSWORD, role=Membership.Role.ADMIN
        )
        self.base = f"/memories/{self.workspace.pk}"

    @screenshot_on_failure
    def test_an_invalid_webhook_shows_its_field_error_in_the_form(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"{self.base}/webhooks/")
        page.get_by_label("URL").fill("ftp://x.example/h")
        page.get_by_role("button", name="Subscribe").click()
        form = page.locator("form").filter(has=page.get_by_role("button", name="Subscribe"))
        expect(form.get_by_role("alert")).to_have_text(URL_SCHEME)
        expect(page.get_by_label("URL")).to_have_value("ftp://x.example/h")
        expect(page.locator("#toasts")).not_to_contain_text("Something went wrong")
        # The corrected URL goes through from the same form.
        page.get_by_label("URL").fill("https://x.example/h")
        page.get_by_role("button", name="Subscribe").click()
        expect(page.locator("#toasts")).to_contain_text("Copy its signing secret now")
        assert WebhookSubscription.objects.filter(url="https://x.example/h").count() == 1

    @screenshot_on_failure
    def test_a_form_over_the_body_limit_says_it_is_too_large_and_keeps_its_input(self):
        """Django refuses the body before any view runs, with a bare 400 page: the toast names
        the reason instead of "Something went wrong (400)", and nothing is swapped."""
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"{self.base}/webhooks/")
        long_url = "https://x.example/" + "a" * 1_500
        page.get_by_label("URL").fill(long_url)
        with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1_000):
            page.get_by_role("button", name="Subscribe").click()
            expect(page.locator("#toasts")).to_contain_text("The form is too large to send")
        expect(page.locator("#toasts")).not_to_contain_text("Something went wrong")
        expect(page.get_by_label("URL")).to_have_value(long_url)
        assert not WebhookSubscription.objects.exists()
