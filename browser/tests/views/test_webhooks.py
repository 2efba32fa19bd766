from browser.tests.base import BrowserTestCase
from core.access import principal_for_api_key
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services import webhook_subscription_create
from webhooks.tests.receiver import Receiver


class WebhookPageTests(BrowserTestCase):
    def subscribe(self, url="https://example.com/hook"):
        return webhook_subscription_create(principal=principal_for_api_key(self.owner_api_key), url=url)[0]

    def test_an_admin_subscribes_and_sees_the_secret_once(self):
        page = self.open_as(self.owner, self.url("memories:webhooks"))
        assert b"No webhooks yet" in page.content
        response = self.htmx(
            "post",
            self.url("memories:webhook-create"),
            {
                "url": "https://example.com/crm",
                "events": ["fact.created", "entry.created"],
                "description": "CRM",
            },
        )
        assert response.status_code == 200
        assert response["Cache-Control"] == "no-store"
        subscription = WebhookSubscription.objects.get()
        assert subscription.events == ["entry.created", "fact.created"]
        assert b"whsec_" in response.content
        again = self.client.get(self.url("memories:webhooks"))
        assert b"whsec_" not in again.content
        assert b"https://example.com/crm" in again.content

    def test_bad_input_shows_the_form_again_with_the_error(self):
        self.login(self.owner)
        for data in (
            {"url": "ftp://x.example/h"},
            {"url": "https://x.example/h", "events": ["fact.exploded"]},
        ):
            response = self.htmx("post", self.url("memories:webhook-create"), data)
            # 200 so that htmx swaps the errors in (htmx 2 swaps no 4xx); a plain post gets 400.
            assert response.status_code == 200, data
            assert b'class="error"' in response.content, data
        assert not WebhookSubscription.objects.exists()

    def test_the_delivery_log_shows_each_attempt_and_filters_by_status(self):
        with Receiver(statuses=(500,)) as receiver:
            subscription = self.subscribe(receiver.url)
            self.open_as(self.owner, self.url("memories:webhook", subscription_id=subscription.pk))
            with self.captureOnCommitCallbacks(execute=True):
                self.htmx("post", self.url("memories:webhook-ping", subscription_id=subscription.pk))
        delivery = WebhookDelivery.objects.get()
        assert (delivery.status, delivery.response_status) == ("retrying", 500)
        page = self.client.get(self.url("memories:webhook", subscription_id=subscription.pk))
        assert b"HTTP 500" in page.content and b"retrying" in page.content
        filtered = self.htmx(
            "get",
            self.url("memories:webhook", subscription_id=subscription.pk) + "?status=succeeded",
            target="deliveries",
        )
        assert b"No deliveries with this status" in filtered.content
        assert b"<html" not in filtered.content

    def test_pause_rotate_and_delete(self):
        subscription = self.subscribe()
        self.open_as(self.owner, self.url("memories:webhook", subscription_id=subscription.pk))
        paused = self.htmx("post", self.url("memories:webhook-toggle", subscription_id=subscription.pk))
        assert b"Enable again" in paused.content
        subscription.refresh_from_db()
        assert not subscription.is_active
        rotated = self.htmx("post", self.url("memories:webhook-rotate", subscription_id=subscription.pk))
        assert b"whsec_" in rotated.content and rotated["Cache-Control"] == "no-store"
        deleted = self.htmx("post", self.url("memories:webhook-delete", subscription_id=subscription.pk))
        assert deleted["HX-Redirect"] == self.url("memories:webhooks")
        assert not WebhookSubscription.objects.exists()

    def test_editors_viewers_and_outsiders_cannot_reach_them(self):
        subscription = self.subscribe()
        detail = self.url("memories:webhook", subscription_id=subscription.pk)
        for user in (self.teammate, self.viewer):
            self.login(user)
            assert self.client.get(self.url("memories:webhooks")).status_code == 403
            assert self.client.get(detail).status_code == 403
            assert (
                self.client.post(
                    self.url("memories:webhook-delete", subscription_id=subscription.pk)
                ).status_code
                == 403
            )
        self.login(self.outsider)
        assert self.client.get(detail).status_code == 404
        assert WebhookSubscription.objects.count() == 1
