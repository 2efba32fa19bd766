"""Sending under the conditions a queue produces: a delivery handed out twice, a URL the HTTP
client cannot send to, a subscription deleted while its request is in flight."""

from datetime import timedelta
from unittest import mock

from django.utils import timezone

from core.access import principal_for_api_key
from core.testing import MemoryTestCase
from memory_client.webhooks import signature_verify as client_signature_verify
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services import (
    webhook_deliver,
    webhook_secret_rotate,
    webhook_subscription_create,
    webhooks_sweep,
)
from webhooks.services.dispatch import DELIVERY_LEASE, _deliveries_enqueue
from webhooks.tasks import webhook_deliver_task
from webhooks.tests.receiver import Receiver


def _delivery(subscription, **kwargs):
    kwargs.setdefault("event_id", "evt_1")
    kwargs.setdefault("event_type", "fact.created")
    kwargs.setdefault("payload", {"id": "evt_1", "type": "fact.created"})
    return WebhookDelivery.objects.create(subscription=subscription, **kwargs)


class QueuedTwiceTests(MemoryTestCase):
    def setUp(self):
        self.principal = principal_for_api_key(self.owner_api_key)

    def test_a_delivery_handed_out_again_while_its_task_waited_is_sent_once(self):
        with Receiver(statuses=(500,)) as receiver:
            subscription, _ = webhook_subscription_create(principal=self.principal, url=receiver.url)
            row = _delivery(subscription)
            messages = []
            with mock.patch.object(webhook_deliver_task, "delay", side_effect=lambda *a: messages.append(a)):
                _deliveries_enqueue([row.pk])
                # The webhooks queue is backed up past the lease: the sweep hands it out again.
                with self.captureOnCommitCallbacks(execute=True):
                    webhooks_sweep(now=timezone.now() + DELIVERY_LEASE + timedelta(seconds=1))
            assert len(messages) == 2
            for args in messages:
                webhook_deliver_task.apply(args=args)
        # One POST; the retry waits for its backoff instead of being sent by the second message.
        assert len(receiver.requests) == 1
        row.refresh_from_db()
        assert (row.status, row.attempts) == ("retrying", 1)
        assert row.next_attempt_at > timezone.now() + timedelta(seconds=20)
        subscription.refresh_from_db()
        assert subscription.consecutive_failures == 1


class UnsendableTests(MemoryTestCase):
    def setUp(self):
        self.principal = principal_for_api_key(self.owner_api_key)

    def test_a_url_the_http_client_cannot_encode_is_a_failed_attempt_not_a_crash(self):
        # Accepted when subscribing (a valid URL), refused by the HTTP client's IDNA encoder.
        subscription, _ = webhook_subscription_create(principal=self.principal, url="http://xn--a.com/hook")
        delivery = webhook_deliver(delivery_id=_delivery(subscription).pk)
        assert (delivery.status, delivery.attempts, delivery.response_status) == ("retrying", 1, None)
        assert delivery.last_error
        subscription.refresh_from_db()
        assert subscription.consecutive_failures == 1

    def test_a_subscription_deleted_while_its_request_is_in_flight_ends_quietly(self):
        with Receiver() as receiver:
            subscription, _ = webhook_subscription_create(principal=self.principal, url=receiver.url)
            row = _delivery(subscription)

            def sent_then_deleted(subscription, delivery):
                WebhookSubscription.objects.filter(pk=subscription.pk).delete()
                return 200, ""

            with mock.patch("webhooks.services.delivery._post", side_effect=sent_then_deleted):
                assert webhook_deliver(delivery_id=row.pk) is None
        assert not WebhookDelivery.objects.exists()


class ClientVerificationTests(MemoryTestCase):
    def test_the_python_clients_check_accepts_the_current_secret_only_and_refuses_a_replay(self):
        principal = principal_for_api_key(self.owner_api_key)
        with Receiver(statuses=(500, 200)) as receiver:
            subscription, old = webhook_subscription_create(principal=principal, url=receiver.url)
            row = _delivery(subscription)
            webhook_deliver(delivery_id=row.pk)
            new = webhook_secret_rotate(principal=principal, subscription=subscription)
            webhook_deliver(delivery_id=row.pk)  # the retry, after the rotation
        first, retry = ({k.lower(): v for k, v in r["headers"].items()} for r in receiver.requests)
        body = receiver.requests[1]["body"]
        assert client_signature_verify(secret=old, header=first["x-memory-signature"], body=body)
        assert client_signature_verify(secret=new, header=retry["x-memory-signature"], body=body)
        assert not client_signature_verify(secret=old, header=retry["x-memory-signature"], body=body)
        assert not client_signature_verify(secret=new, header=retry["x-memory-signature"], body=body + b" ")
        timestamp = int(retry["x-memory-signature"].split(",")[0][2:])
        assert not client_signature_verify(
            secret=new, header=retry["x-memory-signature"], body=body, now=timestamp + 301
        )
        assert first["x-memory-delivery"] == retry["x-memory-delivery"] == str(row.pk)
