"""An agent a writable workspace key names for the first time is registered by the episodic
service, in the transaction that stores the entries, never before it: a create, a batch or a
synchronous extraction that the service itself refuses after the ids resolved (a field error,
a failed model with nothing stored) leaves the slug unknown. Another request registering the
same slug first is no error: the write goes to that row, decided with its settings."""

import time

from django.db import connection, transaction
from django.test import TransactionTestCase
from django.urls import reverse

from core.access import principal_for_api_key
from core.errors import ApplicationError
from core.models import Agent
from core.services import agent_get_or_create, agent_register
from core.testing import thread_started, workspace_api_client
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import (
    EPISODIC_DISABLED,
    EVIDENCE_REQUIRED,
    entries_create,
    entry_create,
    entry_extract,
)
from episodic.tests.factories import (
    NewAgentWriteTestCase,
    memory_user_factory,
    use_test_chat,
    use_test_embeddings,
)
from threads.selectors import memory_context_for_write

LIST = reverse("api:episodic_entries:list")
BATCH = reverse("api:episodic_entries:batch")
EXTRACT = reverse("api:episodic_entries:extract")

SAID = "I adopted a cat named Miso."
CANDIDATE = {"content": "Ada adopted a cat named Miso.", "source": "user_assertion", "evidence": SAID}


class ServiceRefusalAgentRegistrationTests(NewAgentWriteTestCase):
    def pending(self):
        principal = principal_for_api_key(self.owner_api_key)
        context = memory_context_for_write(principal=principal, agent="newbot", memory_user=self.person.pk)
        assert context.agent._state.adding
        return context

    # Refused by the service: no agent

    def test_a_create_the_service_refuses_registers_no_agent(self):
        """The evidence a source needs is checked by entry_create, after the view resolved
        the agent, the person and the source message."""
        response = self.post(LIST, content="Ada adopted a cat.", source="user_assertion")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["fields"] == {"evidence": [EVIDENCE_REQUIRED]}
        self.assert_no_agent()

    def test_a_batch_the_service_refuses_registers_no_agent(self):
        items = [{"content": "Ada adopted a cat."}, {"content": "Ada likes tea.", "source": "user_assertion"}]
        response = self.post(BATCH, items=items)
        assert response.status_code == 400, response.content
        assert response.json()["error"]["fields"] == {"items[1].evidence": [EVIDENCE_REQUIRED]}
        self.assert_no_agent()

    def test_a_synchronous_extraction_whose_model_failed_registers_no_agent(self):
        """The chat endpoint answers 500: the result reports the error and stores nothing."""
        use_test_chat(self.server, self.workspace)
        self.server.fail_next = 100
        response = self.post(EXTRACT, transcript=[{"role": "user", "content": SAID}], sync=True)
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["llm_error"]
        assert body["stored"] == []
        self.assert_no_agent()

    # Accepted: registered once, with what is stored

    def test_a_synchronous_extraction_whose_model_failed_still_stores_the_clients_candidates(self):
        use_test_chat(self.server, self.workspace)
        self.server.fail_next = 100
        response = self.post(
            EXTRACT, transcript=[{"role": "user", "content": SAID}], candidates=[CANDIDATE], sync=True
        )
        assert response.status_code == 200, response.content
        assert response.json()["llm_error"]
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert [entry["agent"] for entry in response.json()["stored"]] == ["newbot"]
        assert EpisodicEntry.objects.get().agent_id == agent.pk

    def test_a_synchronous_extraction_that_stores_nothing_without_error_registers_the_agent(self):
        """Every candidate rejected is an answer, not a refusal, as a queued extraction's agent
        is registered with its job whatever the job stores."""
        candidate = {**CANDIDATE, "evidence": "I never said this."}
        response = self.post(
            EXTRACT,
            transcript=[{"role": "user", "content": SAID}],
            candidates=[candidate],
            use_llm=False,
            sync=True,
        )
        assert response.status_code == 200, response.content
        assert response.json()["stored"] == []
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").count() == 1

    # Registered meanwhile by another request: the write goes to its row

    def test_a_create_whose_agent_was_registered_meanwhile_goes_to_that_agent(self):
        context = self.pending()
        winner = agent_get_or_create(workspace=self.workspace, slug="newbot")
        result = entry_create(
            agent=context.agent, memory_user=self.person, content="Ada adopted a cat.", actor="test"
        )
        assert result.created
        assert result.entry.agent_id == winner.pk
        assert result.entry.agent.slug == "newbot"
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").count() == 1

    def test_a_create_whose_agent_was_registered_meanwhile_is_decided_with_its_settings(self):
        """Registered with episodic memory off, the agent refuses the entry (409)."""
        context = self.pending()
        agent_register(workspace=self.workspace, slug="newbot", memory_settings={"episodic_memory": False})
        with self.assertRaisesMessage(ApplicationError, EPISODIC_DISABLED) as caught:
            entry_create(
                agent=context.agent, memory_user=self.person, content="Ada adopted a cat.", actor="test"
            )
        assert caught.exception.code == "episodic_disabled"
        assert not EpisodicEntry.objects.exists()

    def test_a_batch_whose_agent_was_registered_meanwhile_goes_to_that_agent(self):
        context = self.pending()
        winner = agent_get_or_create(workspace=self.workspace, slug="newbot")
        results = entries_create(
            agent=context.agent,
            memory_user=self.person,
            items=[{"content": "Ada adopted a cat."}, {"content": "Ada likes green tea."}],
            actor="test",
        )
        assert [r.created for r in results] == [True, True]
        assert set(EpisodicEntry.objects.values_list("agent_id", flat=True)) == {winner.pk}
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").count() == 1

    def test_an_extraction_whose_agent_was_registered_meanwhile_goes_to_that_agent(self):
        context = self.pending()
        winner = agent_get_or_create(workspace=self.workspace, slug="newbot")
        result = entry_extract(
            agent=context.agent,
            memory_user=self.person,
            transcript=[{"role": "user", "content": SAID}],
            candidates=[CANDIDATE],
            use_llm=False,
        )
        assert [entry.agent_id for entry in result.stored] == [winner.pk]
        assert EpisodicEntry.objects.get().agent_id == winner.pk
        assert Agent.objects.filter(workspace=self.workspace, slug="newbot").count() == 1


class ConcurrentNewAgentTests(TransactionTestCase):
    """Requests naming the same new agent at once all succeed, and register it once."""

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.workspace, _, self.client_api = workspace_api_client()
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        # The key's first use records its last_used_at: done here, not by the racing requests.
        self.client_api.get(LIST)

    def test_a_create_a_batch_and_an_extraction_naming_one_new_agent_all_succeed(self):
        answers = {}

        def post(name, path, **body):
            def run():
                body_ = {"agent": "newbot", "memory_user": str(self.person.pk), **body}
                answers[name] = self.client_api.post(path, body_, format="json")

            return run

        targets = [
            post("create", LIST, content="Ada adopted a cat."),
            post("batch", BATCH, items=[{"content": "Ada likes green tea."}]),
            post(
                "extract",
                EXTRACT,
                transcript=[{"role": "user", "content": SAID}],
                candidates=[CANDIDATE],
                use_llm=False,
                sync=True,
            ),
        ]
        errors, threads = [], []
        # The slug inserted here, uncommitted, holds every request's insert of it on the unique
        # index until this transaction rolls back: then one request registers the agent and
        # the others find it registered meanwhile.
        with transaction.atomic():
            Agent.objects.create(workspace=self.workspace, slug="newbot", name="newbot")
            for target in targets:
                threads.append(thread_started(target, errors))
                _until_waiting(len(threads))
            transaction.set_rollback(True)
        for thread in threads:
            thread.join(60)
        assert not errors, errors

        assert {name: answer.status_code for name, answer in answers.items()} == {
            "create": 201,
            "batch": 201,
            "extract": 200,
        }, {name: answer.content for name, answer in answers.items()}
        agent = Agent.objects.get(workspace=self.workspace, slug="newbot")
        assert EpisodicEntry.objects.count() == 3
        assert set(EpisodicEntry.objects.values_list("agent_id", flat=True)) == {agent.pk}
        assert answers["create"].json()["agent"] == "newbot"


def _until_waiting(count: int, timeout: float = 30) -> None:
    """Return once `count` backends of the test database wait on a lock (or after `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.02)
