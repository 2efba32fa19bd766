"""Issue 11, finding 2: ids in thread and message bodies are resolved through the read scope.

`agent_key` is bound to `agent`; rows of `other_agent` or of another workspace must answer
like ids that do not exist, and store nothing.
"""

import uuid

from core.testing import MemoryTestCase
from identities.tests.factories import MemoryUserFactory
from threads.models import Message, Thread
from threads.services import PARENT_UNKNOWN
from threads.tests.factories import append, make_thread

THREADS = "/api/v1/threads/"


def messages_url(thread) -> str:
    return f"/api/v1/threads/{thread.pk}/messages/"


class MessageReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.own_thread = make_thread(workspace=cls.workspace, agent=cls.agent)
        cls.own_message = append(cls.own_thread, ("user", "hello"))[0]
        cls.sibling_thread = make_thread(workspace=cls.workspace, agent=cls.agent)
        cls.sibling_message = append(cls.sibling_thread, ("user", "elsewhere"))[0]
        cls.foreign_thread = make_thread(workspace=cls.workspace, agent=cls.other_agent)
        cls.foreign_message = append(cls.foreign_thread, ("user", "secret"))[0]
        cls.outsider_person = MemoryUserFactory(workspace=cls.other_workspace)

    def post_with_parent(self, parent_id):
        body = {"role": "assistant", "content": "hi", "parent": str(parent_id)}
        return self.api(self.agent_key).post(messages_url(self.own_thread), body, format="json")

    def assert_parent_like_a_random_id(self, parent_id):
        before = Message.objects.count()
        random = self.post_with_parent(uuid.uuid4())
        named = self.post_with_parent(parent_id)
        assert random.status_code == 400, random.json()
        assert random.json()["error"]["fields"] == {"messages[0].parent": [PARENT_UNKNOWN]}
        assert (named.status_code, named.json()) == (random.status_code, random.json())
        assert Message.objects.count() == before

    def test_a_parent_in_another_agents_thread_answers_like_a_random_id(self):
        """A parent message of another agent's thread: the error of an unknown parent."""
        self.assert_parent_like_a_random_id(self.foreign_message.pk)

    def test_a_parent_in_another_thread_is_unknown_for_this_thread(self):
        """A parent is a message of this thread; any other id is an unknown parent."""
        self.assert_parent_like_a_random_id(self.sibling_message.pk)

    def test_a_parent_in_this_thread_is_accepted(self):
        """Naming an earlier message of the same thread regenerates from it."""
        response = self.post_with_parent(self.own_message.pk)
        assert response.status_code == 201, response.json()
        assert response.json()["messages"][0]["parent_id"] == str(self.own_message.pk)

    def test_another_workspaces_person_answers_like_a_random_id(self):
        """A thread for another workspace's person: the 404 of an unknown person."""
        before = Thread.objects.count()
        api = self.api(self.agent_key)
        random = api.post(THREADS, {"memory_user": str(uuid.uuid4())}, format="json")
        foreign = api.post(THREADS, {"memory_user": str(self.outsider_person.pk)}, format="json")
        assert random.status_code == 404, random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert Thread.objects.count() == before
