"""A review decision takes procedure_lineage_lock once: procedure_update, called under it, is
told the lineage is held and asks neither the advisory keys nor the versions' row locks again
(it used to, for keys the decision held already: one advisory and one locking statement more)."""

from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from core.access import Principal
from core.services import agent_get_or_create, workspace_create
from procedures.models import Procedure
from procedures.services import procedure_create
from procedures.tests.factories import proposal_create
from review.selectors import TIER_PROCEDURE
from review.services import review_approve


class OneLineageLockPerDecisionTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.workspace = workspace_create(name="Acme")
        cls.agent = agent_get_or_create(workspace=cls.workspace, slug="assistant")
        cls.principal = Principal(workspace=cls.workspace, role="editor")

    def decide(self, **kwargs) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            review_approve(principal=self.principal, tier=TIER_PROCEDURE, **kwargs)
        return [query["sql"] for query in captured.captured_queries]

    def test_an_approval_locks_its_lineage_in_one_call(self):
        """One advisory statement and one FOR NO KEY UPDATE of the lineage's versions."""
        procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Deploy",
            procedure_type="prompt_template",
            content="v1",
        )
        proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Deploy", signature="task:Deploy"
        )

        sent = self.decide(item_id=proposal.pk)

        assert sum("pg_advisory_xact_lock" in sql for sql in sent) == 1
        assert sum("FOR NO KEY UPDATE" in sql for sql in sent) == 1
        assert list(
            Procedure.objects.filter(workspace=self.workspace, name="Deploy")
            .order_by("version")
            .values_list("version", "is_active")
        ) == [(1, False), (2, True)]

    def test_an_approval_with_a_new_name_locks_both_lineages_in_one_call(self):
        """The rename and the activation are decided under the decision's one lock."""
        proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Learned: ship", signature="task:Learned: ship"
        )

        sent = self.decide(item_id=proposal.pk, edits={"name": " Ship "})

        assert sum("pg_advisory_xact_lock" in sql for sql in sent) == 1
        assert sum("FOR NO KEY UPDATE" in sql for sql in sent) == 1
        proposal.refresh_from_db()
        assert (proposal.name, proposal.is_active) == ("Ship", True)
