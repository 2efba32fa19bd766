"""Embedding entries and messages that change while their vectors are computed (issue 11, finding 5)."""

from django.db import connection

from core.testing import MemoryTestCase
from core.testing_embeddings import TEST_MODEL, RacingEmbeddingProvider
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entry_delete, entry_embed_batch, entry_update
from episodic.tests.factories import entry_factory, memory_user_factory
from threads.models import Message, MessageEmbedding
from threads.services import message_embed_batch, thread_append_messages, thread_create


class EntryEmbedBatchTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = memory_user_factory(cls.workspace)

    def entry(self, content):
        return entry_factory(agent=self.agent, memory_user=self.person, content=content, embed=False)

    def test_an_entry_deleted_while_embedding_is_skipped(self):
        """Deleting an entry during its embedding gives no vector and no integrity error."""
        kept, gone = self.entry("Ada moved to Lisbon."), self.entry("Ada adopted a cat.")
        provider = RacingEmbeddingProvider(during=lambda: entry_delete(entry=gone, actor="test"))

        assert entry_embed_batch(entry_ids=[kept.pk, gone.pk], provider=provider) == 1

        assert list(EntryEmbedding.objects.values_list("entry_id", flat=True)) == [kept.pk]
        assert EpisodicEntry.objects.get(pk=kept.pk).embedding_model == TEST_MODEL
        connection.check_constraints()

    def test_an_entry_edited_while_embedding_keeps_no_vector_of_the_old_content(self):
        """The old content's vector is dropped; the edit's own task embeds the new content."""
        entry = self.entry("Ada moved to Lisbon.")
        provider = RacingEmbeddingProvider(
            during=lambda: entry_update(
                entry=EpisodicEntry.objects.get(pk=entry.pk), actor="test", content="Ada moved to Porto."
            )
        )

        assert entry_embed_batch(entry_ids=[entry.pk], provider=provider) == 0
        assert not EntryEmbedding.objects.filter(entry=entry).exists()
        assert EpisodicEntry.objects.get(pk=entry.pk).embedding_model == ""

        assert entry_embed_batch(entry_ids=[entry.pk], provider=provider) == 1
        assert provider.calls[-1] == ["Ada moved to Porto."]


class MessageEmbedBatchTests(MemoryTestCase):
    def test_a_message_deleted_while_embedding_is_skipped(self):
        """Deleting a message (its thread) during its embedding gives no vector and no integrity error."""
        person = memory_user_factory(self.workspace)
        kept_thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=person)
        gone_thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=person)
        thread_append_messages(thread=kept_thread, messages=[{"role": "user", "content": "Tea, please."}])
        thread_append_messages(thread=gone_thread, messages=[{"role": "user", "content": "Coffee."}])
        ids = list(Message.objects.order_by("thread__created_at").values_list("pk", flat=True))
        provider = RacingEmbeddingProvider(during=lambda: Message.objects.filter(thread=gone_thread).delete())

        assert message_embed_batch(message_ids=ids, provider=provider) == 1

        assert list(MessageEmbedding.objects.values_list("thread_id", flat=True)) == [kept_thread.pk]
        connection.check_constraints()
