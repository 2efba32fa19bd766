"""`POST /api/v1/facts/remember/` registers the agent it names only with a fact it accepts."""

import uuid

from core.access import principal_for_api_key
from core.models import Agent
from core.services import agent_get_or_create, agent_register
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.services import fact_remember
from threads.selectors import memory_context_for_write

REMEMBER = "/api/v1/facts/remember/"


class RememberNewAgentTests(MemoryTestCase):
    def remember(self, **body):
        return self.api().post(REMEMBER, {"key": "k", "value": "v", **body}, format="json")

    def test_a_refused_fact_registers_no_agent(self):
        """A user fact without its person (400) and an unknown source message (404) leave the
        slug unknown."""
        assert self.remember(agent="newbot", scope="user").status_code == 400
        response = self.remember(agent="newbot", scope="agent", source_message=str(uuid.uuid4()))
        assert response.status_code == 404, response.content
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_an_accepted_fact_registers_the_agent(self):
        response = self.remember(agent="newbot", scope="agent")
        assert response.status_code == 201, response.content
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert Fact.objects.get(pk=response.json()["fact"]["id"]).agent_id == agent.pk

    def test_an_invalid_slug_is_a_400(self):
        response = self.remember(agent="not a slug!", scope="agent")
        assert response.status_code == 400, response.content
        assert "agent" in response.json()["error"]["fields"] or "slug" in response.json()["error"]["fields"]
        assert not Fact.objects.filter(workspace=self.workspace).exists()

    def test_an_agent_registered_meanwhile_gets_the_fact(self):
        """Another request registering the same slug between resolution and write wins: the
        fact points at its row, and no second agent appears."""
        principal = principal_for_api_key(self.owner_api_key)
        context = memory_context_for_write(principal=principal, agent="newbot")
        assert context.agent._state.adding
        winner = agent_get_or_create(workspace=self.workspace, slug="newbot")
        result = fact_remember(
            workspace=self.workspace,
            key="k",
            value="v",
            scope="agent",
            agent=context.agent,
            principal=principal,
        )
        assert result.fact.agent_id == winner.pk
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").count() == 1

    def test_an_agent_registered_meanwhile_with_review_holds_the_fact(self):
        """The fact is decided for the row that won, with its settings: registered with review
        "all", it holds the agent's fact (found by a fresh-eyes review: the pending agent's
        default settings had decided it)."""
        principal = principal_for_api_key(self.owner_api_key)
        context = memory_context_for_write(principal=principal, agent="newbot")
        winner = agent_register(workspace=self.workspace, slug="newbot", memory_settings={"review": "all"})
        result = fact_remember(
            workspace=self.workspace,
            key="k",
            value="v",
            scope="agent",
            agent=context.agent,
            source=Fact.Source.AGENT_TOOL,
            principal=principal,
        )
        assert (result.fact.agent_id, result.outcome) == (winner.pk, "held")
