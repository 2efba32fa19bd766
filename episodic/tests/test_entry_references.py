"""Issue 11, finding 2: the context ids of extraction and search go through the key's scope.

`agent_key` is bound to `agent`; a thread of `other_agent` must answer like a random id.
"""

import uuid

from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from identities.tests.factories import MemoryUserFactory, MessageFactory, ThreadFactory

EXTRACT = "/api/v1/episodic-entries/extract/"
SEARCH = "/api/v1/episodic-entries/search/"


class EntryReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.foreign_thread = ThreadFactory(agent=cls.other_agent, memory_user=cls.person)
        MessageFactory(thread=cls.foreign_thread, content="I moved to Lyon last year.")

    def assert_like_a_random_thread(self, url, body):
        before = EpisodicEntry.objects.count()
        api = self.api(self.agent_key)
        random = api.post(url, {**body, "thread": str(uuid.uuid4())}, format="json")
        foreign = api.post(url, {**body, "thread": str(self.foreign_thread.pk)}, format="json")
        assert random.status_code == 404, random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert EpisodicEntry.objects.count() == before

    def test_extracting_from_another_agents_thread_answers_like_a_random_id(self):
        """Extraction naming another agent's thread: 404 of an unknown thread, nothing stored."""
        candidate = {"content": "Lives in Lyon.", "source": "user_assertion", "evidence": "moved to Lyon"}
        self.assert_like_a_random_thread(EXTRACT, {"sync": True, "use_llm": False, "candidates": [candidate]})

    def test_searching_another_agents_thread_answers_like_a_random_id(self):
        """Search naming another agent's thread: the 404 of an unknown thread."""
        self.assert_like_a_random_thread(SEARCH, {"query": "Lyon", "mode": "lexical"})
