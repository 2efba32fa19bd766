"""Vectors enter the HNSW graph only when flagged (`in_graph`, core.lib.vectors): the graph
indexes are rebuilt over the flagged rows, which are all the rows stored before, and a B-tree
finds a scope's rows outside the graph. Built concurrently, so writes go on meanwhile; the old
index serves searches until it is dropped."""

import django.contrib.postgres.indexes
import django.db.models.functions.comparison
import pgvector.django.indexes
import pgvector.django.vector
from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("store", "0003_gin_indexes_without_pending_list"),
    ]

    operations = [
        # Every vector stored so far is in the graph: the column arrives true for them
        # (no table rewrite), and false becomes the default for the rows stored after.
        migrations.AddField(
            model_name="storeitemembedding",
            name="in_graph",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.AlterField(
            model_name="storeitemembedding",
            name="in_graph",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="In the model's HNSW graph; set in bulk for scopes that a search walks.",
            ),
        ),
        # The rows outside the graph, which the HNSW plan sorts exactly (none yet).
        AddIndexConcurrently(
            model_name="storeitemembedding",
            index=models.Index(
                condition=models.Q(("in_graph", False)),
                fields=["workspace", "agent", "model"],
                name="store_item_emb_outside_graph",
            ),
        ),
        AddIndexConcurrently(
            model_name="storeitemembedding",
            index=pgvector.django.indexes.HnswIndex(
                django.contrib.postgres.indexes.OpClass(
                    django.db.models.functions.comparison.Cast(
                        "embedding", pgvector.django.vector.VectorField(dimensions=384)
                    ),
                    name="vector_cosine_ops",
                ),
                condition=models.Q(("in_graph", True), ("model", "all-MiniLM-L6-v2")),
                ef_construction=64,
                m=16,
                name="store_item_emb_graph",
            ),
        ),
        RemoveIndexConcurrently(model_name="storeitemembedding", name="store_item_embedding_hnsw"),
        AddIndexConcurrently(
            model_name="storeitemembedding",
            index=pgvector.django.indexes.HnswIndex(
                django.contrib.postgres.indexes.OpClass(
                    django.db.models.functions.comparison.Cast(
                        "embedding", pgvector.django.vector.VectorField(dimensions=768)
                    ),
                    name="vector_cosine_ops",
                ),
                condition=models.Q(("in_graph", True), ("model", "all-mpnet-base-v2")),
                ef_construction=64,
                m=16,
                name="store_item_emb_mpnet_graph",
            ),
        ),
        RemoveIndexConcurrently(model_name="storeitemembedding", name="store_item_emb_mpnet_hnsw"),
    ]
