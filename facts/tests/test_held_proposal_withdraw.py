"""An agent-bound key withdraws (deletes) its own proposal for a global fact while it waits for
review; the current global value, another agent's proposal and a proposal already rejected
stay a 403 `workspace_key_required`, on the detail, batch and `forget` paths."""

import json

from core.services import api_key_create
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.selectors import fact_lookup
from facts.services import OUTCOME_HELD, fact_remember, fact_review_reject

REMEMBER = "/api/v1/facts/remember/"
BATCH = "/api/v1/facts/batch-delete/"
TOOLS = "/api/v1/tools/call/"


class WithdrawHeldProposalTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.other_agent_api_key, cls.other_agent_key = api_key_create(
            workspace=cls.workspace, agent=cls.other_agent
        )

    def setUp(self):
        self.office = fact_remember(
            workspace=self.workspace, key="office_city", value="Lisbon", scope="global"
        ).fact
        self.mine = self.propose(self.agent_key, "Porto")
        self.theirs = self.propose(self.other_agent_key, "Faro")

    def propose(self, key, value) -> Fact:
        response = self.api(key).post(
            REMEMBER, {"key": "office_city", "value": value, "scope": "global"}, format="json"
        )
        assert response.status_code == 201, response.json()
        assert response.json()["outcome"] == OUTCOME_HELD
        return Fact.objects.get(pk=response.json()["fact"]["id"])

    def assert_workspace_key_required(self, response):
        assert response.status_code == 403, response.json()
        assert response.json()["error"]["code"] == "workspace_key_required"

    def assert_current_unchanged(self):
        assert fact_lookup(workspace=self.workspace, key="office_city").pk == self.office.pk

    def test_the_proposing_key_deletes_its_held_proposal(self):
        response = self.api(self.agent_key).delete(f"/api/v1/facts/{self.mine.pk}/")
        assert response.status_code == 200, response.json()
        assert response.json() == {"facts": 1}
        assert not Fact.objects.filter(pk=self.mine.pk).exists()
        assert Fact.objects.filter(pk=self.theirs.pk).exists()
        self.assert_current_unchanged()

    def test_the_key_still_cannot_delete_the_current_global_value(self):
        self.assert_workspace_key_required(
            self.api(self.agent_key).delete(f"/api/v1/facts/{self.office.pk}/")
        )
        self.assert_current_unchanged()

    def test_the_key_cannot_delete_another_agents_proposal(self):
        self.assert_workspace_key_required(
            self.api(self.agent_key).delete(f"/api/v1/facts/{self.theirs.pk}/")
        )
        assert Fact.objects.get(pk=self.theirs.pk).review == Fact.Review.HELD

    def test_a_rejected_proposal_stays_the_operators_decision(self):
        """Deleting the rejection would let the agent propose that value again."""
        fact_review_reject(fact=self.mine, actor="operator:owner")
        self.assert_workspace_key_required(self.api(self.agent_key).delete(f"/api/v1/facts/{self.mine.pk}/"))
        assert Fact.objects.get(pk=self.mine.pk).review == Fact.Review.REJECTED

    def test_batch_delete_withdraws_its_own_proposal(self):
        response = self.api(self.agent_key).post(BATCH, {"ids": [str(self.mine.pk)]}, format="json")
        assert response.status_code == 200, response.json()
        assert not Fact.objects.filter(pk=self.mine.pk).exists()

    def test_batch_delete_with_any_other_global_fact_deletes_nothing(self):
        for other in (self.office, self.theirs):
            response = self.api(self.agent_key).post(
                BATCH, {"ids": [str(self.mine.pk), str(other.pk)]}, format="json"
            )
            self.assert_workspace_key_required(response)
        assert Fact.objects.filter(pk__in=[self.mine.pk, self.theirs.pk, self.office.pk]).count() == 3

    def test_the_forget_tool_withdraws_its_own_proposal_only(self):
        def forget(fact):
            call = {"type": "tool_use", "id": "toolu_1", "name": "forget", "input": {"fact": str(fact.pk)}}
            return self.api(self.agent_key).post(TOOLS, call, format="json").json()

        refused = forget(self.theirs)
        assert json.loads(refused["content"])["error"]["code"] == "workspace_key_required"
        assert "is_error" not in forget(self.mine)
        assert not Fact.objects.filter(pk=self.mine.pk).exists()
        assert Fact.objects.filter(pk=self.theirs.pk).exists()

    def test_a_workspace_key_still_deletes_any_of_them(self):
        response = self.api().post(BATCH, {"ids": [str(self.mine.pk), str(self.theirs.pk)]}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json() == {"facts": 2}
