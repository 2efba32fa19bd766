"""Vector index definitions shared by the tiers whose tables hold one row per (item, model).

Every such table has an `in_graph` flag: only flagged rows are in the model's HNSW graph. A
new vector is stored outside it (the column's default), since inserting into the graph
costs far more than the row (docs/speed.md, "Vectors enter the graph when a search needs
it") while a search uses the graph only for a scope past `core.ranking.exact_scope_max`.
A search that takes the HNSW plan walks the graph for the scope's flagged rows and sorts
its other rows exactly (`core.ranking.vector_sql`), so a flag can cost time, never a
result; it asks for its scope's rows to be added to the graph
(`core.services.vector_graph_extend`).
"""

from django.contrib.postgres.indexes import OpClass
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from pgvector.django import HnswIndex, VectorField

from core.lib.local_models import MINILM, LocalModel


def in_graph_field() -> models.BooleanField:
    """The flag of a vector row that is in its model's HNSW graph (see the module's text)."""
    return models.BooleanField(
        default=False,
        db_default=False,
        help_text="In the model's HNSW graph; set in bulk for scopes that a search walks.",
    )


def outside_graph_index(name: str, fields: list[str]) -> models.Index:
    """A B-tree over `fields` (the table's scope columns) of the rows outside the graph, which
    the HNSW plan sorts exactly: without it that half would read every row of the scope to
    check its flag."""
    return models.Index(fields=fields, condition=Q(in_graph=False), name=name)


def hnsw_index(name: str, column: str, model: LocalModel = MINILM) -> HnswIndex:
    """A cosine HNSW index over the rows of `column` of a local model that are `in_graph`
    (each local model has its own).

    The column holds vectors of any length (one row per model), so the index covers one
    model through a cast to its fixed dimension; queries must repeat the cast and the
    model and graph conditions or the planner cannot use it (core.ranking does).
    """
    return HnswIndex(
        OpClass(Cast(column, VectorField(dimensions=model.dimensions)), name="vector_cosine_ops"),
        name=name,
        condition=Q(model=model.name, in_graph=True),
        m=16,
        ef_construction=64,
    )
