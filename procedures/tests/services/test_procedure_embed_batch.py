"""Embedding procedures that change while their vectors are computed (issue 11, finding 5)."""

from django.db import connection

from core.testing import MemoryTestCase
from core.testing_embeddings import RacingEmbeddingProvider
from procedures.models import Procedure, ProcedureEmbedding
from procedures.services import procedure_delete, procedure_embed_batch, procedure_update


class ProcedureEmbedBatchTests(MemoryTestCase):
    def create(self, name):
        return Procedure.objects.create(
            workspace=self.workspace,
            name=name,
            procedure_type=Procedure.ProcedureType.PROMPT_TEMPLATE,
            content="Do the thing.",
        )

    def test_a_procedure_deleted_while_embedding_is_skipped(self):
        """Deleting a procedure during its embedding gives no vector and no integrity error."""
        kept, gone = self.create("Refunds"), self.create("Shipping")
        provider = RacingEmbeddingProvider(during=lambda: procedure_delete(procedure=gone, actor="test"))

        written = procedure_embed_batch(procedure_ids=[kept.pk, gone.pk], provider=provider)

        assert written == 1
        assert list(ProcedureEmbedding.objects.values_list("procedure_id", flat=True)) == [kept.pk]
        connection.check_constraints()

    def test_a_procedure_edited_while_embedding_keeps_no_vector_of_the_old_text(self):
        """The vector of a text that changed meanwhile is dropped; the edit's own task embeds the new one."""
        procedure = self.create("Refunds")
        provider = RacingEmbeddingProvider(
            during=lambda: procedure_update(
                procedure=Procedure.objects.get(pk=procedure.pk), actor="test", name="Returns"
            )
        )

        assert procedure_embed_batch(procedure_ids=[procedure.pk], provider=provider) == 0
        assert not ProcedureEmbedding.objects.filter(procedure=procedure).exists()

        assert procedure_embed_batch(procedure_ids=[procedure.pk], provider=provider) == 1
        stored = ProcedureEmbedding.objects.get(procedure=procedure)
        assert provider.calls[-1] == ["Returns."]
        assert stored.text_hash
