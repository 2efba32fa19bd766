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

import numpy as np
from django.contrib.postgres.indexes import OpClass
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from pgvector import Vector
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


# Fixed-point digits of `vector_text`, and the smallest magnitude they write exactly.
_TEXT_DIGITS = 15
# The ASCII digits of every number below 10**5, zero-padded: the 15 decimals are written as
# three such groups, found by indexing (an integer division by an array of powers, per value and
# digit, took most of the function's time).
_TEXT_GROUP = 10**5
_TEXT_GROUPS = ((np.arange(_TEXT_GROUP)[:, None] // 10 ** np.arange(4, -1, -1)) % 10 + ord("0")).astype(
    np.uint8
)
_TEXT_EXACT_MIN = 2.0**-26
_TEXT_WIDTH = _TEXT_DIGITS + 4  # sign, "0.", the digits and a comma


def vector_text(vector) -> str:
    """pgvector's text input for `vector` (a list or array of floats): PostgreSQL stores the
    same float4 values as from pgvector's own text (`Vector.to_text`), in about a third of
    the time for a model's unit vector (70 against 185 us for 384 values).

    pgvector writes each value's shortest repr in a Python loop. Here a vector of float4
    values in (-1, 1), as the local models give, is written at once by numpy, each value as a
    sign and 15 fixed decimals: the decimal is within 5e-16 of the value, less than half the
    float4 spacing of any magnitude from 2**-26 up, so PostgreSQL reads back the same float4.
    A component nearer zero (OpenVINO's bf16 graph gives every MiniLM vector one or two of
    about 1e-33) is written as pgvector writes it, in its place. Any other vector (an
    endpoint's doubles, unnormalised values) is written by pgvector.
    """
    values = np.asarray(vector, dtype=np.float64)
    magnitudes = np.abs(values)
    if values.ndim != 1 or not (magnitudes < 1).all() or not (values.astype(np.float32) == values).all():
        return Vector._to_db(values.tolist())
    scaled = np.rint(magnitudes * 10.0**_TEXT_DIGITS).astype(np.int64)
    chars = np.empty((len(values), _TEXT_WIDTH), dtype=np.uint8)
    chars[:, 0] = np.where(np.signbit(values), ord("-"), ord("+"))
    chars[:, 1] = ord("0")
    chars[:, 2] = ord(".")
    chars[:, 3:8] = _TEXT_GROUPS[scaled // _TEXT_GROUP**2]
    chars[:, 8:13] = _TEXT_GROUPS[(scaled // _TEXT_GROUP) % _TEXT_GROUP]
    chars[:, 13:18] = _TEXT_GROUPS[scaled % _TEXT_GROUP]
    chars[:, -1] = ord(",")
    text = chars.tobytes().decode("ascii")
    tiny = np.flatnonzero((magnitudes < _TEXT_EXACT_MIN) & (magnitudes != 0))
    if len(tiny):
        parts, start = [], 0
        for index in tiny.tolist():
            parts += [text[start * _TEXT_WIDTH : index * _TEXT_WIDTH], f"{float(values[index])},"]
            start = index + 1
        text = "".join([*parts, text[start * _TEXT_WIDTH :]])
    return "[" + text[:-1] + "]"


class VectorText(Vector):
    """A vector that VectorField sends as `vector_text(value)` (pgvector asks a Vector for its
    text)."""

    def __init__(self, value):
        self._text = vector_text(value)

    def to_text(self) -> str:
        return self._text
