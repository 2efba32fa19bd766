"""Message vectors, moved here from the episodes app without touching the data.

The table was created by episodes migration 0002 and keeps its name; this migration only
records the model in this app's state (episodes 0006 drops it from its own).
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
        ('episodes', '0005_embeddings_database_cascade'),
        ('core', '0001_initial'),
        ('identities', '0002_memoryuser_identities_user_name'),
        ('threads', '0003_message_search_tsv'),
    ]

    operations = [
        # State only: the table, its indexes and constraints already exist.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='MessageEmbedding',
                    fields=[
                        ('id', models.BigAutoField(primary_key=True, serialize=False)),
                        ('model', models.CharField(max_length=200)),
                        ('dimensions', models.PositiveIntegerField()),
                        ('embedding', pgvector.django.vector.VectorField()),
                        ('context_embedding', pgvector.django.vector.VectorField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='core.agent')),
                        ('memory_user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='identities.memoryuser')),
                        ('message', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='threads.message')),
                        ('thread', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='threads.thread')),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'episodes_messageembedding',
                        'indexes': [models.Index(fields=['agent', 'memory_user', 'model'], name='episodes_msg_embedding_scope'), pgvector.django.indexes.HnswIndex(django.contrib.postgres.indexes.OpClass(django.db.models.functions.comparison.Cast('embedding', pgvector.django.vector.VectorField(dimensions=384)), name='vector_cosine_ops'), condition=models.Q(('model', 'all-MiniLM-L6-v2')), ef_construction=64, m=16, name='episodes_msg_embedding_hnsw')],
                        'constraints': [models.UniqueConstraint(fields=('message', 'model'), name='episodes_message_embedding_unique')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
