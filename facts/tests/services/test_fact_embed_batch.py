"""Embedding facts that change while their vectors are computed (issue 11, finding 5)."""

from django.db import connection

from core.testing import MemoryTestCase
from core.testing_embeddings import TEST_MODEL, RacingEmbeddingProvider
from facts.models import FactEmbedding
from facts.services import fact_delete, fact_embed_batch
from facts.tests.factories import FactFactory


class FactEmbedBatchTests(MemoryTestCase):
    def test_a_fact_deleted_while_embedding_is_skipped_and_the_rest_are_stored(self):
        """Deleting a fact during its embedding gives no vector for it and no integrity error."""
        kept, gone = FactFactory(workspace=self.workspace), FactFactory(workspace=self.workspace)
        provider = RacingEmbeddingProvider(during=lambda: fact_delete(fact=gone, actor="test"))

        written = fact_embed_batch(fact_ids=[kept.pk, gone.pk], provider=provider)

        assert written == 1
        assert list(FactEmbedding.objects.values_list("fact_id", "model")) == [(kept.pk, TEST_MODEL)]
        # The deferred foreign keys hold, so the task's transaction would commit.
        connection.check_constraints()

    def test_every_fact_gone_is_a_no_op(self):
        """A task for facts that no longer exist writes nothing and does not embed."""
        fact = FactFactory(workspace=self.workspace)
        fact_delete(fact=fact, actor="test")
        provider = RacingEmbeddingProvider()

        assert fact_embed_batch(fact_ids=[fact.pk], provider=provider) == 0
        assert provider.calls == []

    def test_running_twice_stores_one_vector(self):
        """Redelivery of the task (late acknowledgement) leaves one vector per fact and model."""
        fact = FactFactory(workspace=self.workspace)
        provider = RacingEmbeddingProvider()

        assert fact_embed_batch(fact_ids=[fact.pk], provider=provider) == 1
        assert fact_embed_batch(fact_ids=[fact.pk], provider=provider) == 0
        assert FactEmbedding.objects.filter(fact=fact).count() == 1
