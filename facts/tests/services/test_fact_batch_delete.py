from django.db import connection

from core.access import principal_for_api_key
from core.testing import MemoryTestCase
from facts.models import Fact, FactEmbedding
from facts.services import fact_batch_delete, fact_remember


class FactBatchDeleteTests(MemoryTestCase):
    def test_deletes_the_vectors_of_the_deleted_facts(self):
        """Regression: the one-statement delete left FactEmbedding rows behind, and the
        deferred foreign key then failed the commit with a 500."""
        facts = [
            fact_remember(workspace=self.workspace, key=f"k{i}", value=i, scope="global").fact
            for i in range(3)
        ]
        for fact in facts:
            FactEmbedding.objects.create(
                fact=fact, workspace=self.workspace, model="test", dimensions=3, embedding=[1.0, 0.0, 0.0]
            )
        counts = fact_batch_delete(
            principal=principal_for_api_key(self.owner_api_key), ids=[fact.pk for fact in facts]
        )
        assert counts["facts"] == 3
        assert not FactEmbedding.objects.filter(fact_id__in=[fact.pk for fact in facts]).exists()
        assert not Fact.objects.filter(pk__in=[fact.pk for fact in facts]).exists()
        # What COMMIT would check: no row may still point at a deleted fact.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
