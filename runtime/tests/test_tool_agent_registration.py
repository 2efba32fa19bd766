"""A writable workspace key registers an agent by naming it, but only with a write that is
accepted: a refused tool call leaves no agent behind."""

import json
import uuid

from django.test import TransactionTestCase
from rest_framework.test import APIClient

from core.models import Agent
from core.services import agent_get_or_create, api_key_create, workspace_create
from episodic.models import EpisodicEntry
from facts.models import Fact
from identities.models import MemoryUser

URL = "/api/v1/tools/call/"


class RefusedToolCallAgentTests(TransactionTestCase):
    """Without a test transaction around it: inside one, each call runs in a savepoint that a
    failure rolls back, which hid an agent created outside the write."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        _, self.owner_key = api_key_create(workspace=self.workspace, name="owner")

    def api(self):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.owner_key}")
        return client

    def call(self, name, arguments):
        response = self.api().post(
            URL, {"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}, format="json"
        )
        assert response.status_code == 200, response.content
        return response.json()

    def assert_refused_without_agent(self, answer, code):
        assert answer.get("is_error") is True, answer
        assert json.loads(answer["content"])["error"]["code"] == code
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_remember_refused_by_validation_creates_no_agent(self):
        """A user fact without its person is a 400, and the slug it named stays unknown."""
        answer = self.call("remember", {"agent": "newbot", "key": "k", "value": "v", "scope": "user"})
        self.assert_refused_without_agent(answer, "invalid")

    def test_remember_naming_an_unknown_person_creates_no_agent(self):
        answer = self.call(
            "remember", {"agent": "newbot", "key": "k", "value": "v", "memory_user": str(uuid.uuid4())}
        )
        self.assert_refused_without_agent(answer, "not_found")

    def test_remember_naming_another_agents_thread_creates_no_agent(self):
        from threads.models import Thread

        thread = Thread.objects.create(workspace=self.workspace, agent=self.agent)
        answer = self.call(
            "remember",
            {"agent": "newbot", "key": "k", "value": "v", "scope": "session", "thread": str(thread.pk)},
        )
        self.assert_refused_without_agent(answer, "not_found")

    def test_remember_accepted_creates_the_agent_with_its_fact(self):
        """The accepted write registers the agent, and an agent fact points at it."""
        answer = self.call("remember", {"agent": "newbot", "key": "k", "value": "v", "scope": "agent"})
        assert "is_error" not in answer, answer
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert Fact.objects.get(workspace=self.workspace, key="k").agent_id == agent.pk

    def test_remember_global_fact_for_a_new_agent_registers_it(self):
        answer = self.call("remember", {"agent": "newbot", "key": "g", "value": "v"})
        assert "is_error" not in answer, answer
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_store_memory_without_a_person_creates_no_agent(self):
        answer = self.call("store_memory", {"agent": "newbot", "content": "Ana moved to Porto."})
        self.assert_refused_without_agent(answer, "invalid")

    def store_memory_for_ana(self, **arguments):
        """The store_memory tool naming the new agent "newbot", for a person of the workspace."""
        person = MemoryUser.objects.create(workspace=self.workspace, canonical_id="ana")
        body = {"agent": "newbot", "content": "Ana moved to Porto.", "memory_user": str(person.pk)}
        return self.call("store_memory", {**body, **arguments})

    def test_store_memory_with_an_unknown_message_creates_no_agent(self):
        answer = self.store_memory_for_ana(source_message=str(uuid.uuid4()))
        self.assert_refused_without_agent(answer, "not_found")
        assert not EpisodicEntry.objects.filter(workspace=self.workspace).exists()

    def test_store_memory_refused_by_the_service_creates_no_agent(self):
        """entry_create refuses a user's assertion without its evidence, after it embedded."""
        answer = self.store_memory_for_ana(source="user_assertion")
        self.assert_refused_without_agent(answer, "invalid")

    def test_store_memory_accepted_creates_the_agent_with_its_note(self):
        answer = self.store_memory_for_ana()
        assert "is_error" not in answer, answer
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert EpisodicEntry.objects.get(workspace=self.workspace).agent_id == agent.pk

    def test_context_refused_creates_no_agent(self):
        """An append with no thread to append to is a 400 that registers nothing."""
        answer = self.call("context", {"agent": "newbot", "message": "hi", "append": True})
        self.assert_refused_without_agent(answer, "invalid")

    def test_context_naming_an_unknown_thread_creates_no_agent(self):
        answer = self.call("context", {"agent": "newbot", "message": "hi", "thread": str(uuid.uuid4())})
        self.assert_refused_without_agent(answer, "not_found")

    def test_context_accepted_registers_the_agent(self):
        answer = self.call("context", {"agent": "newbot", "message": "hi"})
        assert "is_error" not in answer, answer
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()
