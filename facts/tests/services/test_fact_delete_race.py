"""Deleting a fact while a worker commits its vector (issue 11, finding 5, the delete side)."""

import threading
import time

from django.db import connection, transaction
from django.test import TransactionTestCase

from core.services import workspace_create
from core.testing import backends_waiting_on_a_lock
from facts.models import Fact, FactEmbedding
from facts.services import fact_delete
from facts.tests.factories import FactFactory

DIMENSIONS = 384


class FactDeleteRaceTests(TransactionTestCase):
    def test_a_vector_committed_while_the_delete_waits_goes_with_the_fact(self):
        """The delete's snapshot predates the vector, yet the delete commits and leaves no vector."""
        workspace = workspace_create(name="Acme")
        fact = FactFactory(workspace=workspace)
        inserted, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def worker():
            # What fact_embed_batch does: lock the fact (no key update), write its vector, commit.
            try:
                with transaction.atomic():
                    Fact.objects.select_for_update(no_key=True).get(pk=fact.pk)
                    FactEmbedding.objects.create(
                        fact=fact,
                        workspace=workspace,
                        model="m",
                        dimensions=DIMENSIONS,
                        embedding=[0.1] * 384,
                    )
                    inserted.set()
                    release.wait(30)
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        def deleter():
            try:
                fact_delete(fact=fact, actor="test")
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        embedding_thread = threading.Thread(target=worker)
        embedding_thread.start()
        assert inserted.wait(30)
        delete_thread = threading.Thread(target=deleter)
        delete_thread.start()
        deadline = time.monotonic() + 30
        while backends_waiting_on_a_lock() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        release.set()
        embedding_thread.join(30)
        delete_thread.join(30)

        assert errors == []
        assert not Fact.objects.filter(pk=fact.pk).exists()
        assert not FactEmbedding.objects.filter(fact_id=fact.pk).exists()
