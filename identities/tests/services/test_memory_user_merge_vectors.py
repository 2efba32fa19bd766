from core.testing import MemoryTestCase
from episodic.models import EntryEmbedding
from episodic.tests.factories import entry_factory
from identities.services import memory_user_erase, memory_user_merge
from identities.tests.factories import MemoryUserFactory, MessageFactory, ThreadFactory
from threads.models import MessageEmbedding


class MemoryUserMergeVectorsTests(MemoryTestCase):
    def setUp(self):
        self.source = MemoryUserFactory(workspace=self.workspace)
        self.target = MemoryUserFactory(workspace=self.workspace)

    def message_vector(self, user):
        message = MessageFactory(thread=ThreadFactory(agent=self.agent, memory_user=user))
        return MessageEmbedding.objects.create(
            message=message,
            thread=message.thread,
            workspace=self.workspace,
            agent=self.agent,
            memory_user=user,
            model="test",
            dimensions=3,
            embedding=[1.0, 0.0, 0.0],
        )

    def test_a_merge_moves_the_scope_of_the_sources_vectors(self):
        """Searches filter vectors on their own memory_user column: after a merge the
        source's entry and message vectors answer the target's searches."""
        entry = entry_factory(agent=self.agent, memory_user=self.source)
        message_vector = self.message_vector(self.source)

        result = memory_user_merge(source=self.source, target=self.target, actor="system")

        assert EntryEmbedding.objects.get(entry=entry).memory_user_id == self.target.pk
        message_vector.refresh_from_db()
        assert message_vector.memory_user_id == self.target.pk
        # Vectors follow their rows: the counts name what a person sees, not copies.
        assert "message_vectors" not in result.counts
        assert result.counts["episodic_entries"] == 1

    def test_erasure_takes_the_vectors_with_their_rows(self):
        entry_factory(agent=self.agent, memory_user=self.source)
        self.message_vector(self.source)

        counts = memory_user_erase(memory_user=self.source, actor="system")

        assert not EntryEmbedding.objects.filter(memory_user=self.source.pk).exists()
        assert not MessageEmbedding.objects.filter(memory_user=self.source.pk).exists()
        assert "episodic_entry_vectors" not in counts
