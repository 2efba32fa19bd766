"""The `recall` tool's episodes: full-text matches first, then episodes close by meaning."""

from core.testing import MemoryTestCase
from episodes.services import episode_create
from identities.tests.factories import MemoryUserFactory
from runtime.selectors import recall
from threads.selectors import MemoryContext


class EpisodeRecallTests(MemoryTestCase):
    """Vectors of the local all-MiniLM-L6-v2, the workspace's default provider."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)

    def setUp(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.kettle = self.record(
                input={"goal": "The customer wants their money back for a broken kettle"}
            )
            self.refund = self.record(input={"goal": "Refund request for order 4411"})
            self.dentist = self.record(input={"goal": "Book a dentist appointment for Tuesday"})
            self.other = self.record(agent=self.other_agent, input={"goal": "A refund of a cracked teapot"})

    def record(self, agent=None, **kwargs):
        return episode_create(
            workspace=self.workspace,
            agent=agent or self.agent,
            memory_user=self.person,
            trigger_type="chat",
            **kwargs,
        )

    def context(self):
        return MemoryContext(workspace=self.workspace, agent=self.agent, memory_user=self.person, thread=None)

    def test_episodes_close_by_meaning_follow_the_text_matches(self):
        """No episode holds all of "refund a defective kettle": the kettle one is close by
        meaning (another agent's teapot refund too, but it is out of the context)."""
        result = recall(context=self.context(), query="refund a defective kettle", memory_type="episodes")
        assert result.episodes == [self.kettle]
        assert result.episodes[0].similarity >= 0.45
        text = recall(context=self.context(), query="dentist", memory_type="episodes")
        assert text.episodes[0] == self.dentist and not hasattr(text.episodes[0], "similarity")

    def test_without_semantic_only_text_matches(self):
        result = recall(
            context=self.context(), query="refund a defective kettle", memory_type="episodes", semantic=False
        )
        assert result.episodes == []
