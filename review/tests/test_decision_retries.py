"""A review decision that PostgreSQL aborts as a deadlock victim (another transaction held a
version of the lineage and then asked for the lineage's key the decision held) is read and
decided again once the other committed: one approval, audited once, instead of the 503 of a
database error for the whole request."""

import threading

from django.db import connection, transaction
from django.test import TransactionTestCase

from core.access import Principal
from core.models import AuditEvent
from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from procedures.models import Procedure
from procedures.services import procedure_create
from procedures.services.procedures import _lineage_key
from procedures.tests.factories import proposal_create
from review.selectors import TIER_PROCEDURE
from review.services import review_approve


class DecisionAbortedAsDeadlockVictimTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.principal = Principal(workspace=self.workspace, role="editor")
        self.v1 = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Deploy",
            procedure_type="prompt_template",
            content="v1",
        )
        self.proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Deploy", content="v2"
        )

    def test_an_approval_aborted_by_a_deadlock_is_decided_again(self):
        errors: list[BaseException] = []
        held, ask_key = threading.Event(), threading.Event()
        key = _lineage_key(self.workspace.pk, str(self.agent.pk), "Deploy")

        def other_writer():
            # Holds v1, then (once the approval holds the key and waits for v1) asks the key.
            with transaction.atomic():
                list(Procedure.objects.filter(pk=self.v1.pk).select_for_update())
                held.set()
                assert ask_key.wait(30)
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])

        other = thread_started(other_writer, errors)
        assert held.wait(30)
        approval = thread_started(
            lambda: review_approve(principal=self.principal, tier=TIER_PROCEDURE, item_id=self.proposal.pk),
            errors,
        )
        until_a_backend_waits(timeout=10)
        ask_key.set()
        other.join(60)
        approval.join(60)

        assert errors == []
        assert list(
            Procedure.objects.filter(workspace=self.workspace)
            .order_by("version")
            .values_list("version", "is_active")
        ) == [(1, False), (2, True)]
        reviews = AuditEvent.objects.filter(entity_type="procedure", entity_id=str(self.proposal.pk)).exclude(
            changes__review=None
        )
        assert list(reviews.values_list("changes__review", flat=True)) == ["approved"]
