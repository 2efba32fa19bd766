"""Vectors written by `core.lib.vectors.vector_text` are stored as pgvector's own text stores them."""

import numpy as np
from django.db import connection
from django.test import TestCase
from pgvector import Vector

from core.lib.inserts import rows_insert
from core.lib.vectors import VectorText, vector_text
from core.testing import MemoryTestCase
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services.normalize import entry_content_hash
from episodic.tests.factories import memory_user_factory


def _unit(rows: int, dimensions: int = 384, seed: int = 3) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dimensions)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class VectorTextTests(TestCase):
    def stored(self, text: str) -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::vector::text", [text])
            return cursor.fetchone()[0]

    def assert_stored_as_pgvector_stores(self, vector) -> None:
        expected = self.stored(Vector._to_db(np.asarray(vector, dtype=np.float64).tolist()))
        assert self.stored(vector_text(vector)) == expected

    def test_unit_vectors_are_stored_value_for_value(self):
        for vector in _unit(200):
            self.assert_stored_as_pgvector_stores(vector)
            self.assert_stored_as_pgvector_stores(vector.tolist())

    def test_unit_vectors_take_the_fixed_point_form(self):
        text = vector_text(_unit(1)[0].tolist())
        assert text.startswith("[") and text.count(",") == 383 and "e" not in text
        assert all(len(value) == 18 for value in text[1:-1].split(","))

    def test_edge_values_are_stored_value_for_value(self):
        vector = _unit(1)[0]
        vector[:8] = [0.0, -0.0, 1e-7, -3e-9, 2.0**-26, -(2.0**-26), 0.999999940, -0.5]
        self.assert_stored_as_pgvector_stores(vector)
        # Small, unnormalised or wide values, and doubles: pgvector's text, unchanged.
        for other in (vector * 1e-4, vector * 3.0, [1.0, -1.0, 0.5], [0.1, 0.2, 0.3], [1e-30, 2.5]):
            self.assert_stored_as_pgvector_stores(other)
        assert vector_text([0.1, 0.2]) == Vector._to_db([0.1, 0.2])
        assert vector_text([1.0, 0.5]) == Vector._to_db([1.0, 0.5])

    def test_a_few_tiny_components_keep_the_fixed_point_form(self):
        # OpenVINO's bf16 graph gives every MiniLM vector one or two components of about 1e-33:
        # those are written as pgvector writes them, the others in the fixed-point form.
        vector = _unit(1)[0]
        vector[[0, 5, 383]] = [2.98e-33, -9.29e-34, 1e-30]
        self.assert_stored_as_pgvector_stores(vector)
        values = vector_text(vector)[1:-1].split(",")
        assert [values[i] for i in (0, 5, 383)] == [str(float(vector[i])) for i in (0, 5, 383)]
        assert sum(len(value) == 18 for value in values) == 381

    def test_vector_text_is_what_vector_field_sends(self):
        value = _unit(1)[0].tolist()
        assert EntryEmbedding._meta.get_field("embedding").get_prep_value(VectorText(value)) == vector_text(
            value
        )


class RowsInsertVectorsTests(MemoryTestCase):
    def test_rows_insert_stores_the_vectors_bulk_create_stores(self):
        person = memory_user_factory(self.workspace)
        vectors = _unit(30, seed=11)
        vectors[0, :3] = [0.0, -0.0, 1e-9]

        def entries(prefix):
            return [
                EpisodicEntry(
                    workspace=self.workspace,
                    agent=self.agent,
                    memory_user=person,
                    content=f"{prefix} {i}",
                    content_hash=entry_content_hash(f"{prefix} {i}"),
                    source=EpisodicEntry.Source.AGENT_DIRECT,
                )
                for i in range(len(vectors))
            ]

        ours, theirs = entries("ours"), entries("theirs")
        our_vectors = [
            EntryEmbedding.of(e, v.tolist(), model="m") for e, v in zip(ours, vectors, strict=True)
        ]
        rows_insert((EpisodicEntry, ours), (EntryEmbedding, our_vectors))
        EpisodicEntry.objects.bulk_create(theirs)
        EntryEmbedding.objects.bulk_create(
            [EntryEmbedding.of(e, v.tolist(), model="m") for e, v in zip(theirs, vectors, strict=True)]
        )
        # The objects keep the values they were given.
        assert [v.embedding for v in our_vectors] == [v.tolist() for v in vectors]

        def stored(rows):
            by_entry = {str(e.pk): i for i, e in enumerate(rows)}
            found = EntryEmbedding.objects.filter(entry__in=rows).values_list("entry_id", "embedding")
            return sorted((by_entry[str(entry_id)], list(map(float, vector))) for entry_id, vector in found)

        assert stored(ours) == stored(theirs)
        assert len(stored(ours)) == 30
