"""A subscription deleted between the caller's read and the write (another admin, another
tab) is a 404 not_found from every write that takes it, never a 500, and nothing is stored."""

import pytest

from core.access import principal_for_api_key
from core.errors import NotFoundError
from core.testing import MemoryTestCase
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.selectors import webhook_subscription_get
from webhooks.services import webhook_ping, webhook_secret_rotate, webhook_subscription_update

LIST = "/api/v1/webhooks/"


class SubscriptionDeletedMeanwhileTests(MemoryTestCase):
    def principal(self):
        return principal_for_api_key(self.owner_api_key)

    def setUp(self):
        response = self.api().post(LIST, {"url": "https://example.com/hook"}, format="json")
        self.subscription = webhook_subscription_get(
            principal=self.principal(), subscription_id=response.json()["id"]
        )
        # Read by the caller; deleted by someone else before the write.
        WebhookSubscription.objects.filter(pk=self.subscription.pk).delete()

    def test_every_write_answers_not_found_and_stores_nothing(self):
        writes = {
            "update": lambda: webhook_subscription_update(
                principal=self.principal(), subscription=self.subscription, is_active=False
            ),
            "rotate": lambda: webhook_secret_rotate(
                principal=self.principal(), subscription=self.subscription
            ),
            "ping": lambda: webhook_ping(principal=self.principal(), subscription=self.subscription),
        }
        for name, write in writes.items():
            with self.subTest(name):
                with pytest.raises(NotFoundError) as refused:
                    write()
                assert refused.value.status_code == 404
        assert not WebhookDelivery.objects.exists()
        assert not WebhookSubscription.objects.exists()
