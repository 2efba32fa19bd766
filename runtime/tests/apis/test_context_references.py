"""Issue 11, finding 2: the ids a context request names go through the key's read scope.

`agent_key` is bound to `agent`; rows of `other_agent` or of another workspace must answer
like ids that do not exist, and the turn's message must not be stored.
"""

import uuid

from core.testing import MemoryTestCase
from identities.tests.factories import MemoryUserFactory
from threads.models import Message
from threads.tests.factories import make_thread

URL = "/api/v1/context/"


class ContextReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.foreign_thread = make_thread(
            workspace=cls.workspace, agent=cls.other_agent, memory_user=cls.person
        )
        cls.outsider_person = MemoryUserFactory(workspace=cls.other_workspace)

    def assert_like_a_random_id(self, field, foreign_id, **extra):
        before = Message.objects.count()
        api = self.api(self.agent_key)
        body = {"message": "hello", "append": True, **extra}
        random = api.post(URL, {**body, field: str(uuid.uuid4())}, format="json")
        foreign = api.post(URL, {**body, field: str(foreign_id)}, format="json")
        assert random.status_code == 404, random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert Message.objects.count() == before

    def test_another_agents_thread_answers_like_a_random_id(self):
        """A turn on another agent's thread: the 404 of an unknown thread, nothing appended."""
        self.assert_like_a_random_id("thread", self.foreign_thread.pk)

    def test_another_agents_thread_with_the_person_answers_like_a_random_id(self):
        """Naming the thread's person as well changes nothing."""
        self.assert_like_a_random_id("thread", self.foreign_thread.pk, memory_user=str(self.person.pk))

    def test_another_workspaces_person_answers_like_a_random_id(self):
        """A person of another workspace: the 404 of an unknown person."""
        self.assert_like_a_random_id("memory_user", self.outsider_person.pk)
