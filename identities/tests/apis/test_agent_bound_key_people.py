"""Issue 11, finding 1: an agent-bound key reaches only its agent's rows of a person.

`agent_key` is bound to `agent`; `other_agent` stands for another agent of the same workspace.
"""

import uuid

from core.access import WORKSPACE_KEY_REQUIRED
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.tests.factories import MemoryUserFactory, MessageFactory, ThreadFactory
from threads.models import Message, Thread

LIST = "/api/v1/memory-users/"
IDENTIFY = "/api/v1/memory-users/identify/"
BATCH_DELETE = "/api/v1/memory-users/batch-delete/"


def detail(memory_user_id) -> str:
    return f"/api/v1/memory-users/{memory_user_id}/"


class AgentBoundKeyPeopleTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace, canonical_id="telegram:42")
        cls.person.identities.create(workspace=cls.workspace, channel="telegram", external_id="42")
        cls.other_person = MemoryUserFactory(workspace=cls.workspace)
        own = ThreadFactory(agent=cls.agent, memory_user=cls.person)
        MessageFactory(thread=own)
        foreign = [ThreadFactory(agent=cls.other_agent, memory_user=cls.person) for _ in range(2)]
        for thread in foreign:
            MessageFactory(thread=thread)
            MessageFactory(thread=thread)
        cls.foreign_thread = foreign[0]
        EpisodeFactory(agent=cls.other_agent, memory_user=cls.person)
        fact_remember(workspace=cls.workspace, key="s", value=1, scope="session", thread=cls.foreign_thread)

    def snapshot(self) -> dict:
        return {
            "people": sorted(MemoryUser.objects.values_list("pk", "merged_into_id", "canonical_id")),
            "threads": sorted(Thread.objects.values_list("pk", "memory_user_id")),
            "messages": Message.objects.count(),
            "facts": Fact.objects.count(),
            "episodes": Episode.objects.count(),
        }

    def assert_workspace_key_required(self, response):
        assert response.status_code == 403, response.json()
        error = response.json()["error"]
        assert (error["code"], error["message"]) == ("workspace_key_required", WORKSPACE_KEY_REQUIRED)

    def test_an_agent_bound_key_cannot_erase_a_person(self):
        """Erasure reaches every agent's threads: 403 for an agent-bound key, nothing deleted."""
        before = self.snapshot()
        self.assert_workspace_key_required(self.api(self.agent_key).delete(detail(self.person.pk)))
        assert self.snapshot() == before

    def test_an_agent_bound_key_cannot_merge_people(self):
        """A merge moves every agent's threads: 403 for an agent-bound key, nothing moved."""
        before = self.snapshot()
        response = self.api(self.agent_key).post(
            detail(self.person.pk) + "merge/", {"target": str(self.other_person.pk)}, format="json"
        )
        self.assert_workspace_key_required(response)
        assert self.snapshot() == before

    def test_an_agent_bound_key_cannot_batch_delete_people(self):
        """Batch deletion is erasure too: 403 for an agent-bound key, nothing deleted."""
        before = self.snapshot()
        response = self.api(self.agent_key).post(
            BATCH_DELETE, {"ids": [str(self.person.pk), str(self.other_person.pk)]}, format="json"
        )
        self.assert_workspace_key_required(response)
        assert self.snapshot() == before

    def test_an_agent_bound_key_cannot_edit_a_person(self):
        """Renaming a person changes them for every agent: 403, nothing changed."""
        before = self.snapshot()
        response = self.api(self.agent_key).patch(
            detail(self.person.pk), {"canonical_id": "crm:1", "display_name": "X"}, format="json"
        )
        self.assert_workspace_key_required(response)
        assert self.snapshot() == before
        self.person.refresh_from_db()
        assert self.person.display_name != "X"

    def test_the_refusal_does_not_depend_on_the_id(self):
        """An unknown id answers the same 403, so the refusal tells nothing about existence."""
        api = self.api(self.agent_key)
        self.assert_workspace_key_required(api.delete(detail(uuid.uuid4())))
        self.assert_workspace_key_required(
            api.post(detail(uuid.uuid4()) + "merge/", {"target": str(uuid.uuid4())}, format="json")
        )
        self.assert_workspace_key_required(
            api.post(BATCH_DELETE, {"ids": [str(uuid.uuid4())]}, format="json")
        )

    def test_an_agent_bound_key_may_still_create_and_identify_people(self):
        """Meeting a new person is additive and stays allowed."""
        api = self.api(self.agent_key)
        assert api.post(LIST, {"canonical_id": "crm:new"}, format="json").status_code == 201
        identified = api.post(IDENTIFY, {"channel": "telegram", "external_id": "42"}, format="json")
        assert identified.status_code == 200, identified.json()

    def test_a_workspace_key_erases_every_agents_rows(self):
        """The owner's workspace key erases the person with every agent's rows."""
        response = self.api().delete(detail(self.person.pk))
        assert response.status_code == 200, response.json()
        assert (response.json()["threads"], response.json()["messages"]) == (3, 5)
        assert not Thread.objects.filter(memory_user=self.person.pk).exists()
        assert not MemoryUser.objects.filter(pk=self.person.pk).exists()

    def test_a_workspace_key_merges_and_batch_deletes(self):
        """Merging and batch deletion work for a workspace-wide key."""
        merged = self.api().post(
            detail(self.person.pk) + "merge/", {"target": str(self.other_person.pk)}, format="json"
        )
        assert merged.status_code == 200, merged.json()
        assert merged.json()["counts"]["threads"] == 3
        assert merged.json()["target"]["thread_count"] == 3
        deleted = self.api().post(BATCH_DELETE, {"ids": [str(self.other_person.pk)]}, format="json")
        assert deleted.status_code == 200, deleted.json()
        assert not MemoryUser.objects.filter(pk__in=[self.person.pk, self.other_person.pk]).exists()

    def test_an_agent_bound_key_counts_only_its_agents_threads_and_messages(self):
        """thread_count and message_count in list, detail and identify exclude other agents."""
        api = self.api(self.agent_key)
        listed = {u["id"]: u for u in api.get(LIST).json()["results"]}[str(self.person.pk)]
        shown = api.get(detail(self.person.pk)).json()
        identified = api.post(IDENTIFY, {"channel": "telegram", "external_id": "42"}, format="json").json()
        for body in (listed, shown, identified["memory_user"]):
            assert (body["thread_count"], body["message_count"]) == (1, 1)

    def test_a_workspace_key_counts_every_agent(self):
        """The workspace key's counts include every agent's threads and messages."""
        shown = self.api().get(detail(self.person.pk)).json()
        assert (shown["thread_count"], shown["message_count"]) == (3, 5)
        listed = {u["id"]: u for u in self.api().get(LIST).json()["results"]}[str(self.person.pk)]
        assert (listed["thread_count"], listed["message_count"]) == (3, 5)
