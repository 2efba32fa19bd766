"""The delivery id a receiver deduplicates by is inside the signed body: a captured request
replayed under a new `X-Memory-Delivery` header still carries the id it was sent with, and
changing that id breaks the signature."""

import json
from unittest import mock

from django.test import TransactionTestCase

from core.access import principal_for_api_key
from core.services import api_key_create, audit_record, workspace_create
from core.testing import MemoryTestCase
from webhooks.models import WebhookDelivery
from webhooks.services import webhook_deliver, webhook_ping, webhook_subscription_create, webhooks_dispatch
from webhooks.signing import signature_verify
from webhooks.tests.receiver import Receiver

# The field's name is part of the contract with receivers (docs/webhooks.md), so it is spelled
# out here rather than imported.
DELIVERY_ID_FIELD = "delivery_id"


def _headers(request) -> dict:
    return {name.lower(): value for name, value in request["headers"].items()}


class SignedDeliveryIdTests(MemoryTestCase):
    def setUp(self):
        self.principal = principal_for_api_key(self.owner_api_key)

    def _delivery(self, subscription, payload=None):
        return WebhookDelivery.objects.create(
            subscription=subscription,
            event_id="evt_7",
            event_type="fact.created",
            payload=payload or {"id": "evt_7", "type": "fact.created", "data": {"id": "x"}},
        )

    def test_the_signed_body_carries_the_delivery_id_and_the_event_id(self):
        """A row stored before the body carried the id (no `delivery_id` in its payload) is sent
        with it too."""
        with Receiver() as receiver:
            subscription, secret = webhook_subscription_create(principal=self.principal, url=receiver.url)
            row = self._delivery(subscription)
            webhook_deliver(delivery_id=row.pk)
        [request] = receiver.requests
        headers = _headers(request)
        assert signature_verify(secret=secret, header=headers["x-memory-signature"], body=request["body"])
        assert request["json"][DELIVERY_ID_FIELD] == headers["x-memory-delivery"] == str(row.pk)
        assert request["json"]["id"] == "evt_7"
        assert request["json"]["data"] == {"id": "x"}

    def test_a_replay_under_another_header_id_is_detected_by_the_signed_id(self):
        with Receiver() as receiver:
            subscription, secret = webhook_subscription_create(principal=self.principal, url=receiver.url)
            row = self._delivery(subscription)
            webhook_deliver(delivery_id=row.pk)
        [request] = receiver.requests
        signature = _headers(request)["x-memory-signature"]
        seen = set()

        def receive(body: bytes, header_delivery: str, signature: str) -> str:
            """A receiver as docs/webhooks.md describes it: verify, then dedupe on the body."""
            if not signature_verify(secret=secret, header=signature, body=body):
                return "refused"
            delivery_id = json.loads(body)[DELIVERY_ID_FIELD]
            if delivery_id in seen:
                return "duplicate"
            seen.add(delivery_id)
            return "processed"

        assert receive(request["body"], str(row.pk), signature) == "processed"
        # The attacker changes the header: the signature still holds, the signed id gives it away.
        assert receive(request["body"], "00000000-0000-4000-8000-000000000000", signature) == "duplicate"
        # The attacker changes the id in the body instead: the signature no longer holds.
        forged = json.loads(request["body"])
        forged[DELIVERY_ID_FIELD] = "00000000-0000-4000-8000-000000000000"
        for body in (
            json.dumps(forged, separators=(",", ":"), sort_keys=True).encode(),
            request["body"].replace(str(row.pk).encode(), b"00000000-0000-4000-8000-000000000000"),
        ):
            assert body != request["body"]
            assert receive(body, "00000000-0000-4000-8000-000000000000", signature) == "refused"

    def test_every_retry_of_a_delivery_sends_the_same_body(self):
        with Receiver(statuses=(500, 503, 200)) as receiver:
            subscription, secret = webhook_subscription_create(principal=self.principal, url=receiver.url)
            row = self._delivery(subscription)
            for _ in range(3):
                delivery = webhook_deliver(delivery_id=row.pk)
        assert delivery.status == "succeeded"
        bodies = {request["body"] for request in receiver.requests}
        assert len(receiver.requests) == 3 and len(bodies) == 1
        assert json.loads(bodies.pop())[DELIVERY_ID_FIELD] == str(row.pk)
        for request in receiver.requests:
            headers = _headers(request)
            assert headers["x-memory-delivery"] == str(row.pk)
            assert signature_verify(secret=secret, header=headers["x-memory-signature"], body=request["body"])

    def test_the_logged_payload_is_the_body_sent(self):
        """The delivery log (API and /memories) shows the id the receiver got in the body."""
        with Receiver() as receiver:
            subscription, _ = webhook_subscription_create(principal=self.principal, url=receiver.url)
            with mock.patch("webhooks.tasks.webhook_deliver_task.delay"):
                ping = webhook_ping(principal=self.principal, subscription=subscription)
            ping.refresh_from_db()
            assert ping.payload[DELIVERY_ID_FIELD] == str(ping.pk)
            assert ping.payload["id"] == ping.event_id
            webhook_deliver(delivery_id=ping.pk)
        [request] = receiver.requests
        assert request["json"] == ping.payload

    def test_a_body_id_the_header_does_not_match_is_still_signed_as_sent(self):
        """A stored payload carrying a stale id (a copied row) is sent with the row's own id."""
        with Receiver() as receiver:
            subscription, _ = webhook_subscription_create(principal=self.principal, url=receiver.url)
            row = self._delivery(subscription, payload={"id": "evt_7", DELIVERY_ID_FIELD: "stale"})
            webhook_deliver(delivery_id=row.pk)
        assert receiver.requests[0]["json"][DELIVERY_ID_FIELD] == str(row.pk)


class DispatchedBodyTests(TransactionTestCase):
    def test_a_dispatched_event_carries_its_delivery_id_in_the_stored_and_sent_body(self):
        workspace = workspace_create(name="Acme")
        principal = principal_for_api_key(api_key_create(workspace=workspace)[0])
        with Receiver() as receiver, mock.patch.dict("core.events._listeners", {}, clear=True):
            webhook_subscription_create(principal=principal, url=receiver.url)
            audit_record(
                workspace=workspace, actor="test", action="create", entity_type="fact", entity_id="f1"
            )
            assert webhooks_dispatch(workspace_id=workspace.pk)["deliveries"] == 1
        delivery = WebhookDelivery.objects.get()
        assert delivery.payload[DELIVERY_ID_FIELD] == str(delivery.pk)
        [request] = receiver.requests
        assert request["json"] == delivery.payload
        assert _headers(request)["x-memory-delivery"] == str(delivery.pk)
