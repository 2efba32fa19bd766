"""Episodic entries and their vectors, moved here from the episodes app without touching the data.

The tables were created by episodes migrations 0002-0005 and keep their names; this
migration only records the models in this app's state (episodes 0006 drops them from its own).
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
import django.db.models.functions.comparison
import django.utils.timezone
import pgvector.django.indexes
import pgvector.django.vector
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

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
                    name='EpisodicEntry',
                    fields=[
                        ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('content', models.TextField()),
                        ('content_hash', models.CharField(max_length=64)),
                        ('source', models.CharField(choices=[('user_assertion', 'User assertion'), ('user_accepted_assistant_proposal', 'User accepted assistant proposal'), ('verified_assistant_finding', 'Verified assistant finding')], max_length=40)),
                        ('evidence', models.TextField()),
                        ('source_message_ids', models.JSONField(blank=True, default=list)),
                        ('metadata', models.JSONField(blank=True, default=dict)),
                        ('status', models.CharField(choices=[('active', 'Active'), ('superseded', 'Superseded'), ('rejected', 'Rejected')], default='active', max_length=12)),
                        ('embedding_model', models.CharField(blank=True, max_length=200)),
                        ('search_vector', models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector('content', config='english'), output_field=django.contrib.postgres.search.SearchVectorField())),
                        ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='episodic_entries', to='core.agent')),
                        ('memory_user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='episodic_entries', to='identities.memoryuser')),
                        ('source_thread', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='threads.thread')),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='episodic_entries', to='core.workspace')),
                    ],
                    options={
                        'verbose_name_plural': 'episodic entries',
                        'db_table': 'episodes_episodicentry',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='EntryEmbedding',
                    fields=[
                        ('id', models.BigAutoField(primary_key=True, serialize=False)),
                        ('model', models.CharField(max_length=200)),
                        ('dimensions', models.PositiveIntegerField()),
                        ('embedding', pgvector.django.vector.VectorField()),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='core.agent')),
                        ('memory_user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='identities.memoryuser')),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='core.workspace')),
                        ('entry', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='embeddings', to='episodic.episodicentry')),
                    ],
                    options={
                        'db_table': 'episodes_entryembedding',
                    },
                ),
                migrations.AddIndex(
                    model_name='episodicentry',
                    index=models.Index(fields=['workspace', 'agent', 'memory_user', '-created_at'], name='episodes_entry_scope'),
                ),
                migrations.AddIndex(
                    model_name='episodicentry',
                    index=models.Index(fields=['workspace', 'agent', 'memory_user', 'content_hash'], name='episodes_entry_hash'),
                ),
                migrations.AddIndex(
                    model_name='episodicentry',
                    index=django.contrib.postgres.indexes.GinIndex(fields=['search_vector'], name='episodes_entry_search'),
                ),
                migrations.AddIndex(
                    model_name='episodicentry',
                    index=models.Index(fields=['workspace', '-created_at'], name='episodes_entry_recent'),
                ),
                migrations.AddIndex(
                    model_name='entryembedding',
                    index=models.Index(fields=['agent', 'memory_user', 'model'], name='episodes_entry_emb_scope'),
                ),
                migrations.AddIndex(
                    model_name='entryembedding',
                    index=pgvector.django.indexes.HnswIndex(django.contrib.postgres.indexes.OpClass(django.db.models.functions.comparison.Cast('embedding', pgvector.django.vector.VectorField(dimensions=384)), name='vector_cosine_ops'), condition=models.Q(('model', 'all-MiniLM-L6-v2')), ef_construction=64, m=16, name='episodes_entry_embedding_hnsw'),
                ),
                migrations.AddConstraint(
                    model_name='entryembedding',
                    constraint=models.UniqueConstraint(fields=('entry', 'model'), name='episodes_entry_embedding_unique'),
                ),
            ],
            database_operations=[],
        ),
    ]
