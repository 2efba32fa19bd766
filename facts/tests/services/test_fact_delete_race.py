"""Deleting a fact while a worker commits its vector (issue 11, finding 5, the delete side)."""

import threading

from django.db import transaction
from django.test import TransactionTestCase

from core.services import workspace_create
from core.testing import thread_started, until_a_backend_waits
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

        embedding_thread = thread_started(worker, errors)
        assert inserted.wait(30)
        delete_thread = thread_started(lambda: fact_delete(fact=fact, actor="test"), errors)
        until_a_backend_waits()
        release.set()
        embedding_thread.join(30)
        delete_thread.join(30)

        assert errors == []
        assert not Fact.objects.filter(pk=fact.pk).exists()
        assert not FactEmbedding.objects.filter(fact_id=fact.pk).exists()
