"""Issue 11, finding 2: ids in a remember body are resolved through the key's read scope.

`agent_key` is bound to `agent`; rows of `other_agent` are out of its scope and must answer
exactly like ids that do not exist.
"""

import uuid

from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from facts.models import Fact
from identities.tests.factories import MessageFactory, ThreadFactory

REMEMBER = "/api/v1/facts/remember/"


class RememberReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.own_thread = ThreadFactory(agent=cls.agent)
        cls.own_message = MessageFactory(thread=cls.own_thread)
        cls.own_episode = EpisodeFactory(agent=cls.agent)
        cls.foreign_thread = ThreadFactory(agent=cls.other_agent)
        cls.foreign_message = MessageFactory(thread=cls.foreign_thread)
        cls.foreign_episode = EpisodeFactory(agent=cls.other_agent)
        cls.outsider_episode = EpisodeFactory(agent=cls.outsider_agent)

    def remember(self, key=None, **references):
        body = {"key": "city", "value": "Lyon", "scope": "global", **references}
        return self.api(key or self.agent_key).post(REMEMBER, body, format="json")

    def assert_like_a_random_id(self, field, foreign_id, **extra):
        before = Fact.objects.count()
        random = self.remember(**{field: str(uuid.uuid4())}, **extra)
        foreign = self.remember(**{field: str(foreign_id)}, **extra)
        assert random.status_code == 404, random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert Fact.objects.count() == before

    def test_another_agents_source_message_answers_like_a_random_id(self):
        """source_message of another agent's thread: the 404 of an unknown id, nothing stored."""
        self.assert_like_a_random_id("source_message", self.foreign_message.pk)

    def test_another_agents_source_episode_answers_like_a_random_id(self):
        """source_episode of another agent: the 404 of an unknown id, nothing stored."""
        self.assert_like_a_random_id("source_episode", self.foreign_episode.pk)

    def test_another_workspaces_source_episode_answers_like_a_random_id(self):
        """The outsider workspace's episode is no more visible than a random id."""
        self.assert_like_a_random_id("source_episode", self.outsider_episode.pk)

    def test_another_agents_thread_answers_like_a_random_id(self):
        """A session fact on another agent's thread: the 404 of an unknown thread."""
        self.assert_like_a_random_id("thread", self.foreign_thread.pk, scope="session")

    def test_own_references_are_accepted(self):
        """The key's own agent's message and episode are valid sources."""
        response = self.remember(
            source_message=str(self.own_message.pk), source_episode=str(self.own_episode.pk)
        )
        assert response.status_code == 201, response.json()
        fact = Fact.objects.get(pk=response.json()["fact"]["id"])
        assert (fact.source_message_id, fact.source_episode_id) == (self.own_message.pk, self.own_episode.pk)

    def test_a_workspace_key_may_name_any_agents_rows(self):
        """A workspace-wide key reads every agent, so it may cite every agent's rows."""
        response = self.remember(
            key=self.owner_key,
            source_message=str(self.foreign_message.pk),
            source_episode=str(self.foreign_episode.pk),
        )
        assert response.status_code == 201, response.json()
