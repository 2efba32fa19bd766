"""A writable workspace key registers the agent it names with an episodic write, but only
with one the view accepts: a create, a batch or an extraction refused by the view (an
unknown person or source message, the 409 `episodic_disabled`, no transcript) leaves the
slug unknown."""

import uuid

from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from core.models import Agent, LLMJob
from episodic.apis import SOURCE_MESSAGE_NOT_FOUND, TRANSCRIPT_OR_THREAD
from episodic.models import EpisodicEntry
from episodic.tests.factories import NewAgentWriteTestCase

LIST = reverse("api:episodic_entries:list")
BATCH = reverse("api:episodic_entries:batch")
EXTRACT = reverse("api:episodic_entries:extract")

EPISODIC_OFF = {**settings.MEMORY_DEFAULTS, "episodic_memory": False}


class EpisodicWriteAgentRegistrationTests(NewAgentWriteTestCase):
    # Refused: no agent

    def test_a_create_naming_an_unknown_source_message_registers_no_agent(self):
        response = self.post(LIST, content="Ada adopted a cat.", source_message=str(uuid.uuid4()))
        assert response.status_code == 404, response.content
        assert response.json()["error"]["fields"] == {"source_message": [SOURCE_MESSAGE_NOT_FOUND]}
        self.assert_no_agent()

    def test_a_create_naming_an_unknown_person_registers_no_agent(self):
        response = self.post(LIST, content="Ada adopted a cat.", memory_user=str(uuid.uuid4()))
        assert response.status_code == 404, response.content
        self.assert_no_agent()

    @override_settings(MEMORY_DEFAULTS=EPISODIC_OFF)
    def test_a_create_for_episodic_memory_switched_off_registers_no_agent(self):
        response = self.post(LIST, content="Ada adopted a cat.")
        assert response.status_code == 409, response.content
        assert response.json()["error"]["code"] == "episodic_disabled"
        self.assert_no_agent()

    def test_a_batch_naming_an_unknown_source_message_registers_no_agent(self):
        items = [
            {"content": "Ada adopted a cat."},
            {"content": "Ada likes tea.", "source_message": str(uuid.uuid4())},
        ]
        response = self.post(BATCH, items=items)
        assert response.status_code == 404, response.content
        assert response.json()["error"]["fields"] == {"items[1].source_message": [SOURCE_MESSAGE_NOT_FOUND]}
        self.assert_no_agent()

    @override_settings(MEMORY_DEFAULTS=EPISODIC_OFF)
    def test_a_batch_for_episodic_memory_switched_off_registers_no_agent(self):
        response = self.post(BATCH, items=[{"content": "Ada adopted a cat."}])
        assert response.status_code == 409, response.content
        self.assert_no_agent()

    @override_settings(MEMORY_DEFAULTS=EPISODIC_OFF)
    def test_an_extraction_for_episodic_memory_switched_off_registers_no_agent(self):
        response = self.post(EXTRACT, transcript=[{"role": "user", "content": "I adopted a cat."}])
        assert response.status_code == 409, response.content
        self.assert_no_agent()
        assert not LLMJob.objects.exists()

    def test_an_extraction_without_words_registers_no_agent(self):
        response = self.post(EXTRACT, transcript=[])
        assert response.status_code == 400, response.content
        assert response.json()["error"]["fields"] == {"transcript": [TRANSCRIPT_OR_THREAD]}
        self.assert_no_agent()

    def test_a_write_naming_another_agents_thread_registers_no_agent(self):
        from threads.services import thread_create

        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        response = self.post(LIST, content="Ada adopted a cat.", thread=str(thread.pk))
        assert response.status_code == 404, response.content
        self.assert_no_agent()

    # Accepted: the agent is registered with the write

    def test_an_accepted_create_registers_the_agent(self):
        response = self.post(LIST, content="Ada adopted a cat.")
        assert response.status_code == 201, response.content
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert response.json()["agent"] == "newbot"
        assert EpisodicEntry.objects.get(pk=response.json()["id"]).agent_id == agent.pk

    def test_an_accepted_batch_registers_the_agent(self):
        response = self.post(BATCH, items=[{"content": "Ada adopted a cat."}, {"content": "Ada likes tea."}])
        assert response.status_code == 201, response.content
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert set(EpisodicEntry.objects.values_list("agent_id", flat=True)) == {agent.pk}

    def test_a_queued_extraction_stores_the_agent_its_job_loads(self):
        response = self.post(EXTRACT, transcript=[{"role": "user", "content": "I adopted a cat."}])
        assert response.status_code == 202, response.content
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        job = LLMJob.objects.get()
        assert job.kwargs["agent_id"] == str(agent.pk)

    def test_a_synchronous_extraction_registers_the_agent(self):
        said = "I adopted a cat named Miso."
        response = self.post(
            EXTRACT,
            transcript=[{"role": "user", "content": said}],
            candidates=[
                {"content": "Ada adopted a cat named Miso.", "source": "user_assertion", "evidence": said}
            ],
            use_llm=False,
            sync=True,
        )
        assert response.status_code == 200, response.content
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert [entry["agent"] for entry in response.json()["stored"]] == ["newbot"]
        assert EpisodicEntry.objects.get().agent_id == agent.pk

    def test_an_existing_agent_named_by_slug_is_used_as_before(self):
        response = self.post(LIST, agent="assistant", content="Ada adopted a cat.")
        assert response.status_code == 201, response.content
        assert EpisodicEntry.objects.get(pk=response.json()["id"]).agent_id == self.agent.pk
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_a_read_only_key_naming_a_new_agent_registers_none(self):
        body = {"agent": "newbot", "memory_user": str(self.person.pk), "content": "Ada adopted a cat."}
        response = self.api(self.read_only_key).post(LIST, body, format="json")
        assert response.status_code == 403, response.content
        self.assert_no_agent()
