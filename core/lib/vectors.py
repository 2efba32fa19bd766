"""Vector index definitions shared by the tiers whose tables hold one row per (item, model)."""

from django.contrib.postgres.indexes import OpClass
from django.db.models import Q
from django.db.models.functions import Cast
from pgvector.django import HnswIndex, VectorField

from core.lib.local_models import MINILM, LocalModel


def hnsw_index(name: str, column: str, model: LocalModel = MINILM) -> HnswIndex:
    """A cosine HNSW index over the rows of `column` of a local model (each local model has its own).

    The column holds vectors of any length (one row per model), so the index covers one
    model through a cast to its fixed dimension; queries must repeat the cast and the
    model condition or the planner cannot use it (core.ranking does).
    """
    return HnswIndex(
        OpClass(Cast(column, VectorField(dimensions=model.dimensions)), name="vector_cosine_ops"),
        name=name,
        condition=Q(model=model.name),
        m=16,
        ef_construction=64,
    )
