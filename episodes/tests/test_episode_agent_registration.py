"""POST /api/v1/episodes/ registers the agent a writable workspace key names for the first
time only with an episode it stores: a refused one (an unknown person, another agent's
thread, a field error of episode_create) leaves the slug unknown."""

import uuid

from core.models import Agent
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.services.records import EPISODE_END_NEEDS_OUTCOME
from identities.services import memory_user_create
from threads.services import thread_create

LIST = "/api/v1/episodes/"


class EpisodeCreateAgentRegistrationTests(MemoryTestCase):
    def post(self, **body):
        return self.api().post(LIST, {"agent": "newbot", **body}, format="json")

    def assert_no_agent(self):
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_a_field_error_of_the_service_registers_no_agent(self):
        """episode_create refuses an end without an outcome after the ids resolved."""
        response = self.post(ended_at="2026-11-23T14:40:57Z")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["fields"] == {"ended_at": [EPISODE_END_NEEDS_OUTCOME]}
        self.assert_no_agent()
        assert not Episode.objects.exists()

    def test_an_unknown_person_registers_no_agent(self):
        response = self.post(memory_user=str(uuid.uuid4()))
        assert response.status_code == 404, response.content
        self.assert_no_agent()

    def test_another_agents_thread_registers_no_agent(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent)
        response = self.post(thread=str(thread.pk))
        assert response.status_code == 404, response.content
        self.assert_no_agent()

    def test_an_accepted_episode_registers_the_agent(self):
        person = memory_user_create(workspace=self.workspace, canonical_id="telegram:1")
        response = self.post(memory_user=str(person.pk), outcome="success")
        assert response.status_code == 201, response.content
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert response.json()["agent"] == "newbot"
        assert Episode.objects.get(pk=response.json()["id"]).agent_id == agent.pk

    def test_an_existing_agent_named_by_slug_is_used_as_before(self):
        response = self.post(agent="assistant")
        assert response.status_code == 201, response.content
        assert Episode.objects.get(pk=response.json()["id"]).agent_id == self.agent.pk
        self.assert_no_agent()
