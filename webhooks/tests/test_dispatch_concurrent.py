"""Two workers reading the outbox at once create each delivery once."""

import threading
from unittest import mock

from django.db import connection
from django.test import TransactionTestCase

from core.access import principal_for_api_key
from core.services import api_key_create, audit_record, workspace_create
from webhooks.models import WebhookDelivery
from webhooks.services import webhook_subscription_create, webhooks_dispatch
from webhooks.tests.receiver import Receiver


class ConcurrentDispatchTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.principal = principal_for_api_key(api_key_create(workspace=self.workspace)[0])
        patcher = mock.patch.dict("core.events._listeners", {}, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_two_dispatch_runs_at_once_send_each_event_once(self):
        with Receiver() as receiver:
            webhook_subscription_create(principal=self.principal, url=receiver.url)
            for n in range(20):
                audit_record(
                    workspace=self.workspace,
                    actor="test",
                    action="create",
                    entity_type="fact",
                    entity_id=f"f{n}",
                )
            start = threading.Barrier(2)
            errors = []

            def run():
                try:
                    start.wait(10)
                    webhooks_dispatch(workspace_id=self.workspace.pk)
                except Exception as exc:
                    errors.append(exc)
                finally:
                    connection.close()

            workers = [threading.Thread(target=run) for _ in range(2)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(60)
        assert errors == []
        assert WebhookDelivery.objects.count() == 20
        ids = [request["json"]["data"]["id"] for request in receiver.requests]
        assert sorted(ids) == sorted(f"f{n}" for n in range(20))
