"""Private addresses hidden in other forms, and a DNS answer that changes between the check
and the connection (rebinding): neither reaches the server's own network."""

import socket
from unittest import mock

from django.test import override_settings

from core.access import principal_for_api_key
from core.testing import MemoryTestCase
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services import webhook_deliver, webhook_subscription_create
from webhooks.tests.receiver import Receiver

LIST = "/api/v1/webhooks/"
PUBLIC = "93.184.216.34"


@override_settings(WEBHOOKS_ALLOW_PRIVATE_URLS=False)
class EmbeddedPrivateAddressTests(MemoryTestCase):
    def test_ipv6_forms_that_carry_a_private_ipv4_address_are_refused(self):
        for url in (
            "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped
            "http://[64:ff9b::a00:5]/hook",  # NAT64 of 10.0.0.5
            "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",  # NAT64 of 169.254.169.254
            "http://[2002:a00:5::1]/hook",  # 6to4 of 10.0.0.5
            "http://[::7f00:1]/hook",  # IPv4-compatible 127.0.0.1
            "http://[fd12:3456::1]/hook",  # unique local
        ):
            response = self.api().post(LIST, {"url": url}, format="json")
            assert response.status_code == 400, (url, response.status_code)
            assert "url" in response.json()["error"]["fields"], url
        assert not WebhookSubscription.objects.exists()

    def test_a_host_name_resolving_to_nat64_of_a_private_address_is_refused(self):
        answer = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("64:ff9b::a00:5", 0, 0, 0))]
        with mock.patch("socket.getaddrinfo", return_value=answer):
            response = self.api().post(LIST, {"url": "https://hooks.example.com/x"}, format="json")
        assert response.status_code == 400
        assert "url" in response.json()["error"]["fields"]


def _rebinding_resolver(host_name: str, first: str, then: str):
    """getaddrinfo answering `first` for `host_name` the first time, `then` afterwards (a DNS
    record with a short TTL that its owner changes); other names resolve as usual."""
    real = socket.getaddrinfo
    answers = [first]

    def resolve(host, port, *args, **kwargs):
        if host != host_name:
            return real(host, port, *args, **kwargs)
        address = answers.pop(0) if answers else then
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 0))]

    return resolve


@override_settings(WEBHOOKS_ALLOW_PRIVATE_URLS=False, WEBHOOKS_TIMEOUT_SECONDS=1)
class RebindingTests(MemoryTestCase):
    def test_a_name_that_resolves_to_loopback_after_the_check_is_not_connected_to(self):
        principal = principal_for_api_key(self.owner_api_key)
        with Receiver() as receiver:
            port = receiver.server.server_address[1]
            url = f"http://rebind.example:{port}/hook"
            with mock.patch("socket.getaddrinfo", return_value=[(2, 1, 6, "", (PUBLIC, 0))]):
                subscription, _ = webhook_subscription_create(principal=principal, url=url)
            row = WebhookDelivery.objects.create(
                subscription=subscription,
                event_id="evt_1",
                event_type="fact.created",
                payload={"id": "evt_1", "type": "fact.created"},
            )
            # The check at sending time sees the public address; a second lookup by the HTTP
            # client would see 127.0.0.1, where the receiver (the server's own network) listens.
            with mock.patch(
                "socket.getaddrinfo", side_effect=_rebinding_resolver("rebind.example", PUBLIC, "127.0.0.1")
            ):
                delivery = webhook_deliver(delivery_id=row.pk)
        assert receiver.requests == []
        assert delivery.status == "retrying"

    def test_the_checked_address_receives_the_request_under_the_urls_host_name(self):
        principal = principal_for_api_key(self.owner_api_key)
        with (
            Receiver() as receiver,
            # 127.0.0.1 plays a public address here: the receiver listens there.
            mock.patch("webhooks.services.subscriptions.address_public", return_value=True),
            mock.patch(
                "socket.getaddrinfo",
                side_effect=_rebinding_resolver("hooks.example", "127.0.0.1", "127.0.0.1"),
            ),
        ):
            port = receiver.server.server_address[1]
            subscription, _ = webhook_subscription_create(
                principal=principal, url=f"http://hooks.example:{port}/hook?x=1"
            )
            row = WebhookDelivery.objects.create(
                subscription=subscription,
                event_id="evt_1",
                event_type="fact.created",
                payload={"id": "evt_1"},
            )
            delivery = webhook_deliver(delivery_id=row.pk)
        assert delivery.status == "succeeded"
        [request] = receiver.requests
        assert request["path"] == "/hook?x=1"
        assert request["headers"]["Host"] == f"hooks.example:{port}"
