"""Issue 11, finding 2: ids in an episode body are resolved through the key's read scope.

`agent_key` is bound to `agent`; rows of `other_agent` must answer like ids that do not exist.
"""

import uuid

from core.testing import MemoryTestCase
from episodes.models import Episode
from identities.tests.factories import MemoryUserFactory, ThreadFactory

LIST = "/api/v1/episodes/"


class EpisodeReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.own_thread = ThreadFactory(agent=cls.agent, memory_user=cls.person)
        cls.foreign_thread = ThreadFactory(agent=cls.other_agent, memory_user=cls.person)
        cls.outsider_person = MemoryUserFactory(workspace=cls.other_workspace)

    def create(self, key=None, **fields):
        return self.api(key or self.agent_key).post(LIST, {"trigger_type": "chat", **fields}, format="json")

    def assert_like_a_random_id(self, field, foreign_id):
        before = Episode.objects.count()
        random = self.create(**{field: str(uuid.uuid4())})
        foreign = self.create(**{field: str(foreign_id)})
        assert random.status_code == 404, random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert Episode.objects.count() == before

    def test_another_agents_thread_answers_like_a_random_id(self):
        """An episode on another agent's thread: the 404 of an unknown thread, nothing stored."""
        self.assert_like_a_random_id("thread", self.foreign_thread.pk)

    def test_another_workspaces_person_answers_like_a_random_id(self):
        """A person of another workspace: the 404 of an unknown person, nothing stored."""
        self.assert_like_a_random_id("memory_user", self.outsider_person.pk)

    def test_own_thread_and_shared_person_are_accepted(self):
        """The key's own thread and a person of the workspace are valid references."""
        response = self.create(thread=str(self.own_thread.pk))
        assert response.status_code == 201, response.json()
        assert response.json()["memory_user"] == str(self.person.pk)
        assert self.create(memory_user=str(self.person.pk)).status_code == 201
