"""Writes that read the person before a merge commits and write after it.

The merge moves the rows that exist when it runs. A writer that resolved the person earlier
and wrote later put its row on the merged source, where the target never saw it:

- the embedding batches read the person their vectors copy (and the searches filter on)
  before the embedding call, the slow step, and wrote it after; nothing re-embeds the row
  afterwards, since it has its vector under the model;
- `fact_remember` resolves the person before cross-key consolidation (an embedding or LLM
  call) and wrote the fact after it.

Each writer now holds the person (identities.services.memory_users_hold) inside its writing
transaction and reads the person its row names after that.
"""

from unittest import mock

from core.testing import MemoryTestCase
from core.testing_embeddings import RacingEmbeddingProvider
from episodic.models import EntryEmbedding
from episodic.services.embeddings import entry_embed_batch
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.selectors import fact_lookup
from facts.services import fact_remember
from facts.services import remember as remember_module
from identities.services import memory_user_merge
from identities.tests.factories import MemoryUserFactory
from threads.models import MessageEmbedding
from threads.services.embeddings import message_embed_batch
from threads.tests.factories import append, make_thread


class WritesAcrossAMergeTests(MemoryTestCase):
    def setUp(self):
        self.source = MemoryUserFactory(workspace=self.workspace)
        self.target = MemoryUserFactory(workspace=self.workspace)

    def merge(self):
        memory_user_merge(source=self.source, target=self.target, actor="operator:owner")

    def test_an_entry_vector_written_after_the_merge_is_the_targets(self):
        entry = entry_factory(agent=self.agent, memory_user=self.source, content="Likes tea.", embed=False)

        entry_embed_batch(entry_ids=[entry.pk], provider=RacingEmbeddingProvider(during=self.merge))

        entry.refresh_from_db()
        assert entry.memory_user_id == self.target.pk
        assert EntryEmbedding.objects.get(entry=entry).memory_user_id == self.target.pk

    def test_a_message_vector_written_after_the_merge_is_the_targets(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.source)
        (message,) = append(thread, ("user", "I moved to Lisbon."))

        message_embed_batch(message_ids=[message.pk], provider=RacingEmbeddingProvider(during=self.merge))

        thread.refresh_from_db()
        assert thread.memory_user_id == self.target.pk
        assert MessageEmbedding.objects.get(message=message).memory_user_id == self.target.pk

    def test_a_user_fact_remembered_across_the_merge_is_the_targets(self):
        decide = remember_module.fact_cross_key_decide

        def merge_while_deciding(**kwargs):
            self.merge()
            return decide(**kwargs)

        with mock.patch.object(remember_module, "fact_cross_key_decide", merge_while_deciding):
            fact_remember(
                workspace=self.workspace, key="city", value="Lisbon", scope="user", memory_user=self.source
            )

        assert Fact.objects.get(key="city").memory_user_id == self.target.pk
        assert fact_lookup(workspace=self.workspace, key="city", memory_user=self.target) is not None
