from django.test import TransactionTestCase
from rest_framework.test import APIClient

from core.models import AuditEvent
from core.services import api_key_create, workspace_create
from core.testing import MemoryTestCase
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.signing import signature_verify
from webhooks.tests.receiver import Receiver

LIST = "/api/v1/webhooks/"


class WebhookApiTests(MemoryTestCase):
    def create(self, url="https://example.com/hook", **body):
        response = self.api().post(LIST, {"url": url, **body}, format="json")
        assert response.status_code == 201, response.json()
        return response.json()

    def test_create_shows_the_secret_once_then_list_patch_rotate_and_delete(self):
        created = self.create(events=["fact.created", "entry.created"], description="CRM sync")
        assert created["secret"].startswith("whsec_")
        assert created["events"] == ["entry.created", "fact.created"]
        detail = f"{LIST}{created['id']}/"
        shown = self.api().get(detail).json()
        assert "secret" not in shown
        assert self.api().get(LIST).json()["count"] == 1
        patched = self.api().patch(detail, {"events": [], "is_active": False}, format="json").json()
        assert (patched["events"], patched["is_active"]) == ([], False)
        assert patched["disabled_reason"].startswith("Disabled by api_key:")
        rotated = self.api().post(f"{detail}rotate-secret/").json()
        assert rotated["secret"] not in (created["secret"], "")
        assert self.api().delete(detail).status_code == 204
        assert not WebhookSubscription.objects.exists()
        actions = AuditEvent.objects.filter(entity_type="webhook_subscription").values_list(
            "action", flat=True
        )
        assert sorted(actions) == ["create", "delete", "update", "update"]

    def test_bad_input_is_a_400_naming_the_field(self):
        cases = [
            ({"url": "ftp://example.com/x"}, "url"),
            ({"url": "not a url"}, "url"),
            ({"url": "https://user:pw@example.com/x"}, "url"),
            ({"url": "https://example.com/x", "events": ["fact.exploded"]}, "events"),
            ({"url": "https://example.com/x", "events": "fact.created"}, "events"),
            ({"url": "https://example.com/x", "events": ["x"] * 51}, "events"),
            ({"url": "https://example.com/" + "a" * 2000}, "url"),
            ({"url": "https://example.com/x", "secret": "mine"}, "secret"),
            ({}, "url"),
        ]
        for body, field in cases:
            response = self.api().post(LIST, body, format="json")
            assert response.status_code == 400, (body, response.status_code)
            assert field in response.json()["error"]["fields"], (body, response.json())
        created = self.create()
        response = self.api().patch(f"{LIST}{created['id']}/", {"is_active": "maybe"}, format="json")
        assert response.status_code == 400
        bad_filter = self.api().get(f"{LIST}{created['id']}/deliveries/", {"status": "exploded"})
        assert bad_filter.status_code == 400
        assert WebhookSubscription.objects.count() == 1

    def test_keys_of_an_agent_read_only_or_another_workspace_cannot_reach_them(self):
        created = self.create()
        detail = f"{LIST}{created['id']}/"
        for path in (LIST, detail, f"{detail}deliveries/"):
            assert self.api(self.agent_key).get(path).status_code == 403, path
            assert self.api(self.read_only_key).get(path).status_code == 200, path
        for path in (detail, f"{detail}deliveries/"):
            assert self.api(self.outsider_key).get(path).status_code == 404, path
        assert self.api(self.outsider_key).get(LIST).json()["count"] == 0
        assert self.api(self.outsider_key).delete(detail).status_code == 404
        assert self.api(self.outsider_key).post(f"{detail}rotate-secret/").status_code == 404
        assert (
            self.api(self.agent_key).post(LIST, {"url": "https://x.example/h"}, format="json").status_code
            == 403
        )
        assert self.api(self.read_only_key).post(f"{detail}ping/").status_code == 403
        assert self.api(self.read_only_key).delete(detail).status_code == 403
        assert WebhookSubscription.objects.count() == 1
        assert not WebhookDelivery.objects.exists()


class WebhookEndToEndTests(TransactionTestCase):
    """Real commits: an event is final, and sent, once the transaction that wrote it ends."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.key = api_key_create(workspace=self.workspace)[1]

    def api(self):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.key}")
        return client

    def test_an_event_reaches_the_receiver_signed_and_shows_in_the_log(self):
        with Receiver() as receiver:
            created = (
                self.api().post(LIST, {"url": receiver.url, "events": ["fact.created"]}, format="json").json()
            )
            remembered = self.api().post(
                "/api/v1/facts/remember/",
                {"key": "tone", "value": "formal", "scope": "global", "agent": "assistant"},
                format="json",
            )
            assert remembered.status_code in (200, 201), remembered.json()
            ping = self.api().post(f"{LIST}{created['id']}/ping/")
            assert ping.status_code == 202
        assert receiver.events() == ["fact.created", "ping"]
        request = receiver.requests[0]
        signature = {k.lower(): v for k, v in request["headers"].items()}["x-memory-signature"]
        assert signature_verify(secret=created["secret"], header=signature, body=request["body"])
        assert request["json"]["data"]["id"] == remembered.json()["fact"]["id"]
        log = self.api().get(f"{LIST}{created['id']}/deliveries/").json()
        assert [(d["event_type"], d["status"]) for d in log["results"]] == [
            ("ping", "succeeded"),
            ("fact.created", "succeeded"),
        ]
        only = self.api().get(f"{LIST}{created['id']}/deliveries/", {"event_type": "ping"}).json()
        assert only["count"] == 1
