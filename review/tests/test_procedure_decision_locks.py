"""A review decision on a learned procedure takes its locks in the order every write of a
procedure lineage takes them (the lineage's versions in key order, the proposal among them), so
an approval racing an activation of the same lineage ends as if one ran after the other instead
of a deadlock that PostgreSQL resolves by aborting one of them (an API 503)."""

import threading
import time
import uuid

from django.db import connection, transaction
from django.test import TransactionTestCase

from core.access import Principal
from core.models import AuditEvent
from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started
from procedures.models import Procedure
from procedures.services import procedure_create, procedure_update
from review.selectors import TIER_PROCEDURE
from review.services import review_approve, review_reject


def until_backends_wait(count: int, timeout: float = 30) -> None:
    """Return once `count` backends of the test database wait on a lock (or after `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.02)


class ProposalLockOrderTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.principal = Principal(workspace=self.workspace, role="editor")
        # v1 of "Deploy", and v2 proposed by learning and waiting for review, with a key after
        # v1's: a lineage lock (key order) takes v1 before the proposal.
        self.v1 = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Deploy",
            procedure_type="prompt_template",
            content="v1",
        )
        procedure_update(procedure=self.v1, actor="test", is_active=False)
        self.proposal = Procedure.objects.create(
            id=uuid.UUID(int=self.v1.pk.int + 1),
            workspace=self.workspace,
            agent=self.agent,
            name="Deploy",
            version=2,
            parent=self.v1,
            procedure_type="prompt_template",
            content="v2",
            origin=Procedure.Origin.SELF_LEARNED,
            source_episode_ids=[uuid.uuid4()],
            is_active=False,
        )
        self.v1.refresh_from_db()
        assert self.v1.pk < self.proposal.pk and not self.v1.is_active

    def race(self, decide):
        """`decide` and an activation of v1 both queue behind a transaction holding the proposal
        row: the decision first (it asks for the proposal first on the old order), then the
        activation, which takes v1 before it reaches the proposal."""
        held, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def holder():
            with transaction.atomic():
                Procedure.objects.select_for_update().filter(pk=self.proposal.pk).values_list("pk").first()
                held.set()
                release.wait(30)

        holder_thread = thread_started(holder, errors)
        assert held.wait(30)
        decide_thread = thread_started(decide, errors)
        until_backends_wait(1, timeout=10)
        activate_thread = thread_started(
            lambda: procedure_update(
                procedure=Procedure.objects.get(pk=self.v1.pk), actor="operator", is_active=True
            ),
            errors,
        )
        until_backends_wait(2, timeout=10)
        release.set()
        for thread in (holder_thread, decide_thread, activate_thread):
            thread.join(30)
        return errors

    def decisions(self):
        return list(
            AuditEvent.objects.filter(entity_type="procedure", entity_id=str(self.proposal.pk))
            .exclude(changes__review=None)
            .values_list("changes__review", flat=True)
        )

    def test_an_approval_and_an_activation_of_the_same_lineage_both_complete(self):
        """No deadlock: the approval activates the proposal, then the activation of v1 (which
        waited for it) rolls the lineage back to v1; one version is active."""
        errors = self.race(
            lambda: review_approve(principal=self.principal, tier=TIER_PROCEDURE, item_id=self.proposal.pk)
        )
        assert errors == []
        assert self.decisions() == ["approved"]
        active = Procedure.objects.filter(workspace=self.workspace, name="Deploy", is_active=True)
        assert list(active.values_list("pk", flat=True)) == [self.v1.pk]
        assert Procedure.objects.filter(workspace=self.workspace).count() == 2

    def test_a_rejection_and_an_activation_of_the_same_lineage_both_complete(self):
        """A rejection changes no lineage, but takes the same locks: both complete."""
        errors = self.race(
            lambda: review_reject(
                principal=self.principal, tier=TIER_PROCEDURE, item_id=self.proposal.pk, reason="noise"
            )
        )
        assert errors == []
        assert self.decisions() == ["rejected"]
        active = Procedure.objects.filter(workspace=self.workspace, name="Deploy", is_active=True)
        assert list(active.values_list("pk", flat=True)) == [self.v1.pk]

    def test_an_approval_renamed_onto_another_lineage_is_applied(self):
        """Approving with a new name locks the lineage it moves into as well: the proposal is
        active under that name, and that lineage's active version steps down."""
        ship = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Ship",
            procedure_type="prompt_template",
            content="s",
        )
        review_approve(
            principal=self.principal,
            tier=TIER_PROCEDURE,
            item_id=self.proposal.pk,
            edits={"name": "Ship"},
        )
        self.proposal.refresh_from_db()
        ship.refresh_from_db()
        assert self.proposal.is_active and self.proposal.name == "Ship"
        assert not ship.is_active
        assert self.decisions() == ["approved"]
