"""An HNSW index for the vectors of all-mpnet-base-v2 (EMBEDDING_LOCAL_MODEL), as the default
model has one: partial on that model's rows, through a cast to its 768 dimensions
(core.lib.vectors.hnsw_index). Empty until that model is chosen, so it builds at once; built
CONCURRENTLY (not in a transaction) so that writes go on meanwhile on a table that has rows.
"""

import django.contrib.postgres.indexes
import django.db.models.functions.comparison
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('core', '0004_llm_job_defer'),
        ('episodes', '0008_episodeembedding_database_cascade'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='episodeembedding',
            index=pgvector.django.indexes.HnswIndex(django.contrib.postgres.indexes.OpClass(django.db.models.functions.comparison.Cast('embedding', pgvector.django.vector.VectorField(dimensions=768)), name='vector_cosine_ops'), condition=models.Q(('model', 'all-mpnet-base-v2')), ef_construction=64, m=16, name='episode_emb_mpnet_hnsw'),
        ),
    ]
