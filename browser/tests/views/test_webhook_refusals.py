"""A refused Pause / Enable again / Send a ping on a webhook's page says why, in place.

They redirected a refusal back to the page with a flash message (a 302 like a change that went
through), and a subscription deleted meanwhile or named by another workspace's id was a bare
404 that htmx does not swap. Now they answer as every refused row button does
(browser.lib.rendering.action_refused): a plain post gets the refusal's status and the page
with the reason, htmx a 200 with the reason in place and toasted.
"""

import uuid
from unittest import mock

from django.urls import reverse

from browser.tests.base import BrowserTestCase
from browser.views import webhooks as webhook_views
from core.access import principal_for_api_key
from core.errors import READ_ONLY_KEY, ApplicationError
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.selectors import SUBSCRIPTION_NOT_FOUND
from webhooks.services import webhook_secret_rotate, webhook_subscription_create, webhook_subscription_update

BUTTONS = ("webhook-toggle", "webhook-ping")
PING_REFUSED = "This subscription cannot be pinged now."


class WebhookButtonRefusalTests(BrowserTestCase):
    def setUp(self):
        self.subscription = webhook_subscription_create(
            principal=principal_for_api_key(self.owner_api_key), url="https://example.com/hook"
        )[0]
        self.login(self.owner)

    def post(self, name, *, htmx: bool, subscription_id=None, workspace=None):
        url = reverse(
            f"memories:{name}",
            kwargs={
                "workspace_id": (workspace or self.workspace).pk,
                "subscription_id": subscription_id or self.subscription.pk,
            },
        )
        if htmx:
            return self.htmx("post", url)
        return self.client.post(url)

    def assert_refused(self, response, *, htmx: bool, status: int, code: str, message: str):
        body = response.content.decode()
        assert response.status_code == (200 if htmx else status), (htmx, response.status_code)
        assert f'data-refusal="{code}"' in body and message in body, htmx
        if htmx:
            assert message in response["HX-Trigger"] and '"level": "error"' in response["HX-Trigger"]
            assert "<html" not in body
        else:
            assert "<html" in body

    def test_a_subscription_deleted_meanwhile_is_a_404_on_the_list_page(self):
        WebhookSubscription.objects.filter(pk=self.subscription.pk).delete()
        for name in BUTTONS:
            for htmx in (False, True):
                response = self.post(name, htmx=htmx)
                self.assert_refused(
                    response, htmx=htmx, status=404, code="not_found", message=SUBSCRIPTION_NOT_FOUND
                )
                assert "No webhooks yet" in response.content.decode()
        assert not WebhookDelivery.objects.exists()

    def test_a_pause_that_loses_the_subscription_to_a_delete_is_a_404_not_a_500(self):
        def delete_first(**kwargs):
            WebhookSubscription.objects.filter(pk=kwargs["subscription"].pk).delete()
            return webhook_subscription_update(**kwargs)

        for htmx in (False, True):
            with mock.patch.object(webhook_views, "webhook_subscription_update", side_effect=delete_first):
                response = self.post("webhook-toggle", htmx=htmx)
            self.assert_refused(
                response, htmx=htmx, status=404, code="not_found", message=SUBSCRIPTION_NOT_FOUND
            )

    def test_a_rotation_that_loses_the_subscription_to_a_delete_is_a_404_not_a_500(self):
        """The service's UPDATE finds nothing; no secret is shown for a webhook that is gone."""

        def delete_first(**kwargs):
            WebhookSubscription.objects.filter(pk=kwargs["subscription"].pk).delete()
            return webhook_secret_rotate(**kwargs)

        for htmx in (False, True):
            with mock.patch.object(webhook_views, "webhook_secret_rotate", side_effect=delete_first):
                response = self.post("webhook-rotate", htmx=htmx)
            self.assert_refused(
                response, htmx=htmx, status=404, code="not_found", message=SUBSCRIPTION_NOT_FOUND
            )
            assert "New webhook signing secret" not in response.content.decode()

    def test_a_pause_whose_subscription_is_deleted_right_after_is_a_404_not_a_500(self):
        """Paused, then deleted by another admin before the page is drawn again."""

        def then_deleted(**kwargs):
            paused = webhook_subscription_update(**kwargs)
            WebhookSubscription.objects.filter(pk=paused.pk).delete()
            return paused

        with mock.patch.object(webhook_views, "webhook_subscription_update", side_effect=then_deleted):
            response = self.post("webhook-toggle", htmx=True)
        self.assert_refused(response, htmx=True, status=404, code="not_found", message=SUBSCRIPTION_NOT_FOUND)

    def test_a_refused_ping_or_pause_stays_on_the_page_with_the_reason(self):
        refusals = (
            ("webhook_ping", ApplicationError(PING_REFUSED, code="conflict", status_code=409)),
            (
                "webhook_subscription_update",
                ApplicationError(READ_ONLY_KEY, code="read_only", status_code=403),
            ),
        )
        for service, refusal in refusals:
            for htmx in (False, True):
                with mock.patch.object(webhook_views, service, side_effect=refusal):
                    response = self.post(
                        "webhook-ping" if service == "webhook_ping" else "webhook-toggle", htmx=htmx
                    )
                self.assert_refused(
                    response,
                    htmx=htmx,
                    status=refusal.status_code,
                    code=refusal.code,
                    message=refusal.message,
                )
                # The subscription's own page, as it is now.
                assert "https://example.com/hook" in response.content.decode()
        subscription = WebhookSubscription.objects.get(pk=self.subscription.pk)
        assert subscription.is_active and not WebhookDelivery.objects.exists()

    def test_another_workspaces_id_answers_as_a_random_id(self):
        self.login(self.outsider)
        for name in BUTTONS:
            for htmx in (False, True):
                answers = []
                for subscription_id in (self.subscription.pk, uuid.uuid4()):
                    response = self.post(
                        name, htmx=htmx, subscription_id=subscription_id, workspace=self.other_workspace
                    )
                    self.assert_refused(
                        response, htmx=htmx, status=404, code="not_found", message=SUBSCRIPTION_NOT_FOUND
                    )
                    body = response.content.decode()
                    assert "example.com/hook" not in body and str(subscription_id) not in body
                    answers.append(response.status_code)
                assert answers[0] == answers[1]
        subscription = WebhookSubscription.objects.get(pk=self.subscription.pk)
        assert subscription.is_active and not WebhookDelivery.objects.exists()

    def test_a_pause_and_a_ping_that_go_through_still_redirect(self):
        for name in ("webhook-ping", "webhook-toggle"):
            response = self.post(name, htmx=False)
            assert response.status_code == 302 and response["Location"] == self.url(
                "memories:webhook", subscription_id=self.subscription.pk
            )
        assert not WebhookSubscription.objects.get(pk=self.subscription.pk).is_active
        assert WebhookDelivery.objects.count() == 1
