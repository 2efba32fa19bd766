"""Vectors of episodes (EpisodeEmbedding), for searching them by meaning.

A new table only: no episode row changes. Episodes recorded before it get their vectors
from the embeddings sweep (runtime.tasks.embeddings_sweep_task), a few hundred per run.
"""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.functions.comparison
import django.utils.timezone
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_auditevent_txid"),
        ("episodes", "0006_entries_and_message_vectors_moved_out"),
    ]

    operations = [
        migrations.CreateModel(
            name="EpisodeEmbedding",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("model", models.CharField(max_length=200)),
                ("dimensions", models.PositiveIntegerField()),
                ("embedding", pgvector.django.vector.VectorField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "episode",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="embeddings",
                        to="episodes.episode",
                    ),
                ),
                (
                    "workspace",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.workspace"
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["workspace", "model"], name="episodes_episode_emb_scope"),
                    pgvector.django.indexes.HnswIndex(
                        django.contrib.postgres.indexes.OpClass(
                            django.db.models.functions.comparison.Cast(
                                "embedding", pgvector.django.vector.VectorField(dimensions=384)
                            ),
                            name="vector_cosine_ops",
                        ),
                        condition=models.Q(("model", "all-MiniLM-L6-v2")),
                        ef_construction=64,
                        m=16,
                        name="episodes_episode_embedding_hnsw",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("episode", "model"), name="episodes_episode_embedding_unique"
                    )
                ],
            },
        ),
    ]
