"""Vector index definitions shared by the tiers whose tables hold one row per (item, model)."""

from django.contrib.postgres.indexes import OpClass
from django.db.models import Q
from django.db.models.functions import Cast
from pgvector.django import HnswIndex, VectorField

from core.embeddings import LOCAL_MODEL_DIMENSIONS, LOCAL_MODEL_NAME


def hnsw_index(name: str, column: str) -> HnswIndex:
    """A cosine HNSW index over the local model's rows of `column`.

    The column holds vectors of any length (one row per model), so the index covers one
    model through a cast to its fixed dimension; queries must repeat the cast and the
    model condition or the planner cannot use it (core.ranking does).
    """
    return HnswIndex(
        OpClass(Cast(column, VectorField(dimensions=LOCAL_MODEL_DIMENSIONS)), name="vector_cosine_ops"),
        name=name,
        condition=Q(model=LOCAL_MODEL_NAME),
        m=16,
        ef_construction=64,
    )
