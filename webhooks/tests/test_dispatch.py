"""Audit events become deliveries exactly once, none passed over when transactions commit out
of order, each subscription getting only its workspace's events of the types it asked for."""

import threading
from unittest import mock

from django.db import connection, transaction
from django.test import TransactionTestCase
from rest_framework.test import APIClient

from core.access import principal_for_api_key
from core.models import AuditEvent
from core.services import agent_get_or_create, api_key_create, audit_record, workspace_create
from facts.services import fact_delete, fact_remember
from procedures.models import Procedure
from procedures.services import procedures_learn
from webhooks.models import WebhookDelivery
from webhooks.services import dispatch, webhook_subscription_create, webhooks_dispatch
from webhooks.tests.receiver import Receiver


def _audit(workspace, entity_id="e1", entity_type="fact", action="create"):
    return audit_record(
        workspace=workspace, actor="test", action=action, entity_type=entity_type, entity_id=entity_id
    )


class DispatchTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.other = workspace_create(name="Globex")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.principal = principal_for_api_key(api_key_create(workspace=self.workspace)[0])
        self.receiver = Receiver().__enter__()
        self.addCleanup(self.receiver.__exit__)
        # Dispatch by hand: no nudge after each commit.
        patcher = mock.patch.dict("core.events._listeners", {}, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)

    def subscribe(self, **kwargs):
        return webhook_subscription_create(principal=self.principal, url=self.receiver.url, **kwargs)[0]

    def test_events_of_the_subscribed_types_are_delivered_once(self):
        _audit(self.workspace, "before")  # older than the subscription: never sent
        subscription = self.subscribe(events=["fact.created", "fact.deleted"])
        fact = fact_remember(workspace=self.workspace, key="tone", value="formal", scope="global").fact
        _audit(self.workspace, "ignored", entity_type="thread")
        _audit(self.other, "elsewhere")
        fact_remember(workspace=self.workspace, key="tone", value="casual", scope="global")  # an update
        assert webhooks_dispatch(workspace_id=self.workspace.pk) == {"deliveries": 2, "more": False}
        assert webhooks_dispatch(workspace_id=self.workspace.pk) == {"deliveries": 0, "more": False}
        assert self.receiver.events() == ["fact.created", "fact.created"]
        first = self.receiver.requests[0]["json"]
        assert first["data"]["object"] == "fact"
        assert first["data"]["id"] == str(fact.pk)
        assert first["workspace"] == str(self.workspace.pk)
        assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"succeeded"}
        assert all(d.subscription_id == subscription.pk for d in WebhookDelivery.objects.all())

    def test_an_event_committed_after_a_younger_one_is_not_passed_over(self):
        self.subscribe()
        started, release, done = threading.Event(), threading.Event(), threading.Event()

        def slow_writer():
            try:
                with transaction.atomic():
                    _audit(self.workspace, "slow")  # takes its id (and txid) first
                    started.set()
                    release.wait(10)
            finally:
                connection.close()
                done.set()

        writer = threading.Thread(target=slow_writer)
        writer.start()
        assert started.wait(10)
        _audit(self.workspace, "quick")  # a larger id, committed first
        webhooks_dispatch(workspace_id=self.workspace.pk)
        # The slow transaction is still running: nothing of it, and nothing behind it, is final.
        ids = [r["json"]["data"]["id"] for r in self.receiver.requests]
        assert "slow" not in ids
        release.set()
        assert done.wait(10)
        webhooks_dispatch(workspace_id=self.workspace.pk)
        ids = [r["json"]["data"]["id"] for r in self.receiver.requests]
        assert sorted(ids) == ["quick", "slow"]
        assert len(ids) == 2

    def test_a_backlog_longer_than_a_batch_is_read_in_order_without_repeats(self):
        self.subscribe(events=["fact.deleted"])
        with transaction.atomic():  # one transaction: every event has the same txid
            for n in range(7):
                _audit(self.workspace, f"f{n}", action="delete")
        with (
            mock.patch.object(dispatch, "DISPATCH_BATCH", 3),
            mock.patch("webhooks.tasks.webhooks_dispatch_task.delay_on_commit") as again,
        ):
            runs = [webhooks_dispatch(workspace_id=self.workspace.pk) for _ in range(3)]
        assert [run["more"] for run in runs] == [True, True, False]
        assert again.call_count == 2  # a full batch queues the next run itself
        ids = [r["json"]["data"]["id"] for r in self.receiver.requests]
        assert ids == [f"f{n}" for n in range(7)]

    def test_each_subscription_keeps_its_own_position(self):
        first = self.subscribe(events=["fact.created"])
        _audit(self.workspace, "a")
        webhooks_dispatch(workspace_id=self.workspace.pk)
        second = self.subscribe()
        _audit(self.workspace, "b")
        fact = fact_remember(workspace=self.workspace, key="k", value=1, scope="global").fact
        fact_delete(fact=fact, actor="test")
        webhooks_dispatch(workspace_id=self.workspace.pk)
        by_subscription = {
            sub: sorted(
                WebhookDelivery.objects.filter(subscription=sub).values_list(
                    "event_type", "payload__data__id"
                )
            )
            for sub in (first, second)
        }
        assert by_subscription[first] == sorted(
            [("fact.created", "a"), ("fact.created", "b"), ("fact.created", str(fact.pk))]
        )
        assert by_subscription[second] == sorted(
            [("fact.created", "b"), ("fact.created", str(fact.pk)), ("fact.deleted", str(fact.pk))]
        )

    def test_audit_events_carry_their_transaction_id(self):
        with transaction.atomic():
            one, two = _audit(self.workspace, "1"), _audit(self.workspace, "2")
        three = _audit(self.workspace, "3")
        rows = dict(AuditEvent.objects.filter(pk__in=[one.pk, two.pk, three.pk]).values_list("pk", "txid"))
        assert rows[one.pk] == rows[two.pk] == one.txid
        assert rows[three.pk] > rows[one.pk]


class NudgeTests(TransactionTestCase):
    """With the listener registered (as in production), a commit dispatches at once."""

    def test_a_commit_in_a_subscribed_workspace_is_delivered_without_a_sweep(self):
        workspace = workspace_create(name="Acme")
        quiet = workspace_create(name="Quiet")
        principal = principal_for_api_key(api_key_create(workspace=workspace)[0])
        with Receiver() as receiver:
            webhook_subscription_create(principal=principal, url=receiver.url, events=["fact.created"])
            fact_remember(workspace=workspace, key="tone", value="formal", scope="global")
            with mock.patch("webhooks.tasks.webhooks_dispatch_task.delay") as dispatch:
                fact_remember(workspace=quiet, key="tone", value="formal", scope="global")
            assert receiver.events() == ["fact.created"]
        dispatch.assert_not_called()  # nobody listens to the quiet workspace


class ReviewWaitingTests(TransactionTestCase):
    def test_a_procedure_proposed_for_review_is_sent_as_review_waiting(self):
        """Three successful runs of one task make the learning pass propose an inactive
        procedure; a subscriber to `review.waiting` hears of it (and of nothing else)."""
        workspace = workspace_create(name="Acme")
        agent = agent_get_or_create(workspace=workspace, slug="assistant")
        api_key, secret = api_key_create(workspace=workspace)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        with Receiver() as receiver:
            webhook_subscription_create(
                principal=principal_for_api_key(api_key), url=receiver.url, events=["review.waiting"]
            )
            for goal in ("Refund order 4411", "refund the order 5522", "Order 9 refund"):
                episode = {
                    "agent": "assistant",
                    "trigger_type": "chat",
                    "input": {"goal": goal},
                    "actions": [{"tool": "lookup_order"}, {"tool": "refund_order"}],
                    "outcome": "success",
                }
                assert client.post("/api/v1/episodes/", episode, format="json").status_code == 201
            # The commit of the third run nudges the learning pass (eager here); a pass run by
            # hand afterwards finds nothing new to propose.
            assert procedures_learn(workspace=workspace, agent=agent).proposed == []
        proposed = list(Procedure.objects.filter(workspace=workspace, origin="self_learned"))
        assert len(proposed) == 1 and not proposed[0].is_active
        assert receiver.events() == ["review.waiting"]
        payload = receiver.requests[0]["json"]
        assert payload["data"]["object"] == "procedure"
        assert payload["data"]["id"] == str(proposed[0].pk)
        assert payload["data"]["changes"]["review"] == "waiting"
        assert payload["actor"] == "system:learning"
