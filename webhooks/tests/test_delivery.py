"""Sending: signed requests, retries with backoff, failure, automatic disabling, the sweep."""

from datetime import timedelta
from ipaddress import ip_address
from unittest import mock

from django.test import override_settings
from django.utils import timezone

from core.access import principal_for_api_key
from core.models import AuditEvent
from core.testing import MemoryTestCase
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services import (
    webhook_deliver,
    webhook_deliveries_purge,
    webhook_ping,
    webhook_subscription_create,
    webhook_subscription_update,
    webhooks_sweep,
)
from webhooks.signing import signature_verify
from webhooks.tests.receiver import Receiver


def _delivery(subscription, **kwargs):
    kwargs.setdefault("event_id", "evt_1")
    kwargs.setdefault("event_type", "fact.created")
    kwargs.setdefault("payload", {"id": "evt_1", "type": "fact.created", "data": {"id": "x"}})
    return WebhookDelivery.objects.create(subscription=subscription, **kwargs)


class DeliveryTests(MemoryTestCase):
    def setUp(self):
        self.principal = principal_for_api_key(self.owner_api_key)

    def subscribe(self, url):
        return webhook_subscription_create(principal=self.principal, url=url)

    def test_the_request_is_signed_with_the_subscriptions_secret(self):
        with Receiver() as receiver:
            subscription, secret = self.subscribe(receiver.url)
            delivery = webhook_deliver(delivery_id=_delivery(subscription).pk)
        assert (delivery.status, delivery.attempts, delivery.response_status) == ("succeeded", 1, 200)
        request = receiver.requests[0]
        headers = {name.lower(): value for name, value in request["headers"].items()}
        assert signature_verify(secret=secret, header=headers["x-memory-signature"], body=request["body"])
        assert headers["x-memory-event"] == "fact.created"
        assert headers["x-memory-delivery"] == str(delivery.pk)
        assert headers["content-type"] == "application/json"
        assert request["json"]["data"] == {"id": "x"}

    def test_a_failed_attempt_is_retried_later_with_growing_delays_then_fails(self):
        with Receiver(statuses=(500,)) as receiver, override_settings(WEBHOOKS_MAX_ATTEMPTS=3):
            subscription, _ = self.subscribe(receiver.url)
            row = _delivery(subscription)
            delays = []
            for _ in range(3):
                before = timezone.now()
                delivery = webhook_deliver(delivery_id=row.pk)
                if delivery.next_attempt_at:
                    delays.append((delivery.next_attempt_at - before).total_seconds())
        assert len(receiver.requests) == 3
        assert (delivery.status, delivery.attempts, delivery.last_error) == ("failed", 3, "HTTP 500")
        assert delivery.next_attempt_at is None
        assert 25 < delays[0] < 35 and 50 < delays[1] < 70  # 30 s, then 60 s, with jitter
        subscription.refresh_from_db()
        assert subscription.consecutive_failures == 3

    def test_an_unreachable_receiver_is_a_failed_attempt_not_an_error(self):
        with Receiver() as receiver:
            url = receiver.url
        subscription, _ = self.subscribe(url)  # nothing listens there any more
        delivery = webhook_deliver(delivery_id=_delivery(subscription).pk)
        assert delivery.status == "retrying"
        assert delivery.response_status is None
        assert "ConnectError" in delivery.last_error

    def test_repeated_failures_disable_the_subscription_and_cancel_what_waits(self):
        with Receiver(statuses=(503,)) as receiver, override_settings(WEBHOOKS_DISABLE_AFTER_FAILURES=2):
            subscription, _ = self.subscribe(receiver.url)
            first, waiting = _delivery(subscription), _delivery(subscription, event_id="evt_2")
            webhook_deliver(delivery_id=first.pk)
            webhook_deliver(delivery_id=first.pk)
        subscription.refresh_from_db()
        assert not subscription.is_active
        assert subscription.disabled_reason == "Disabled after 2 failed attempts in a row."
        waiting.refresh_from_db()
        assert waiting.status == "cancelled"
        event = AuditEvent.objects.get(entity_type="webhook_subscription", action="update")
        assert event.actor == "system:webhooks"
        assert event.changes["is_active"] == {"from": True, "to": False}
        # Enabled again: failures cleared, and it sends again.
        with Receiver() as receiver:
            WebhookSubscription.objects.filter(pk=subscription.pk).update(url=receiver.url)
            subscription.refresh_from_db()
            subscription = webhook_subscription_update(
                principal=self.principal, subscription=subscription, is_active=True
            )
            assert (subscription.consecutive_failures, subscription.disabled_reason) == (0, "")
            webhook_ping(principal=self.principal, subscription=subscription)
        assert receiver.events() == ["ping"]

    def test_a_success_clears_the_failure_count(self):
        with Receiver(statuses=(500, 200)) as receiver:
            subscription, _ = self.subscribe(receiver.url)
            row = _delivery(subscription)
            webhook_deliver(delivery_id=row.pk)
            subscription.refresh_from_db()
            assert subscription.consecutive_failures == 1
            assert webhook_deliver(delivery_id=row.pk).status == "succeeded"
        subscription.refresh_from_db()
        assert subscription.consecutive_failures == 0
        assert subscription.last_delivery_at is not None

    def test_a_finished_delivery_is_not_sent_again(self):
        with Receiver() as receiver:
            subscription, _ = self.subscribe(receiver.url)
            row = _delivery(subscription)
            webhook_deliver(delivery_id=row.pk)
            webhook_deliver(delivery_id=row.pk)
        assert len(receiver.requests) == 1

    def test_the_sweep_hands_out_due_and_lost_deliveries_only(self):
        with Receiver() as receiver:
            subscription, _ = self.subscribe(receiver.url)
            now = timezone.now()
            due = _delivery(subscription, status="retrying", next_attempt_at=now - timedelta(seconds=1))
            lost = _delivery(subscription, event_id="evt_lost", next_attempt_at=None)
            later = _delivery(subscription, status="retrying", next_attempt_at=now + timedelta(minutes=5))
            done = _delivery(subscription, status="succeeded")
            with self.captureOnCommitCallbacks(execute=True):
                result = webhooks_sweep(now=now)
        assert result["deliveries"] == 2
        statuses = dict(WebhookDelivery.objects.values_list("pk", "status"))
        assert statuses[due.pk] == statuses[lost.pk] == "succeeded"
        assert statuses[later.pk] == "retrying"
        assert statuses[done.pk] == "succeeded"

    def test_old_finished_deliveries_are_purged(self):
        subscription, _ = self.subscribe("https://example.com/hook")
        old = timezone.now() - timedelta(days=31)
        gone = _delivery(subscription, status="succeeded", created_at=old)
        kept_waiting = _delivery(subscription, status="retrying", created_at=old)
        kept_recent = _delivery(subscription, status="failed")
        assert webhook_deliveries_purge() == 1
        assert set(WebhookDelivery.objects.values_list("pk", flat=True)) == {kept_waiting.pk, kept_recent.pk}
        assert not WebhookDelivery.objects.filter(pk=gone.pk).exists()


@override_settings(WEBHOOKS_ALLOW_PRIVATE_URLS=False)
class PrivateAddressTests(MemoryTestCase):
    def test_private_loopback_and_link_local_urls_are_refused(self):
        principal = principal_for_api_key(self.owner_api_key)
        for url in (
            "http://127.0.0.1:8000/hook",
            "http://localhost/hook",
            "http://10.1.2.3/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/hook",
            "http://0.0.0.0/hook",
        ):
            response = self.api().post("/api/v1/webhooks/", {"url": url}, format="json")
            assert response.status_code == 400, url
            assert "url" in response.json()["error"]["fields"], url
        assert not WebhookSubscription.objects.exists()
        # A host that resolves to a private address later (DNS changed) is refused when sending.
        with mock.patch(
            "webhooks.services.subscriptions.host_addresses", return_value=[ip_address("93.184.216.34")]
        ):
            subscription, _ = webhook_subscription_create(
                principal=principal, url="https://hooks.example.com/x"
            )
        private = [ip_address("10.0.0.5")]
        with mock.patch("webhooks.services.subscriptions.host_addresses", return_value=private):
            delivery = webhook_deliver(delivery_id=_delivery(subscription).pk)
        assert delivery.status == "retrying"
        assert "private" in delivery.last_error
