"""An approval that renames a proposal onto a name whose first version is being created at the
same instant takes the procedure lineage lock too (procedures.services.procedure_lineage_lock,
which exists before the lineage has a row): it waits for the create, then is applied exactly as
it is once that version is stored (the stored version steps down), instead of a 409."""

import threading

from django.db import transaction
from django.test import TransactionTestCase

from core.access import Principal
from core.models import AuditEvent
from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from procedures.models import Procedure
from procedures.services import procedure_create
from procedures.tests.factories import proposal_create
from review.selectors import TIER_PROCEDURE
from review.services import review_approve


class RenamedApprovalRacingFirstCreateTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.principal = Principal(workspace=self.workspace, role="editor")
        self.proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Deploy", content="learned"
        )

    def test_the_approval_waits_for_the_first_create_of_the_new_name(self):
        """Ship v1 is created in a transaction still open when the approval renames the
        proposal to Ship: the approval waits, then the proposal is Ship's active version."""
        created, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def create():
            with transaction.atomic():
                procedure_create(
                    workspace=self.workspace,
                    agent=self.agent,
                    name="Ship",
                    procedure_type="prompt_template",
                    content="written",
                )
                created.set()
                release.wait(30)

        create_thread = thread_started(create, errors)
        assert created.wait(30)
        approve_thread = thread_started(
            lambda: review_approve(
                principal=self.principal,
                tier=TIER_PROCEDURE,
                item_id=self.proposal.pk,
                edits={"name": "Ship"},
            ),
            errors,
        )
        until_a_backend_waits(timeout=10)
        release.set()
        create_thread.join(30)
        approve_thread.join(30)

        assert errors == []
        rows = Procedure.objects.filter(workspace=self.workspace).order_by("version")
        assert list(rows.values_list("name", "version", "is_active", "content")) == [
            ("Ship", 1, False, "written"),
            ("Ship", 2, True, "learned"),
        ]
        decisions = AuditEvent.objects.filter(entity_id=str(self.proposal.pk)).exclude(changes__review=None)
        assert list(decisions.values_list("changes__review", flat=True)) == ["approved"]
