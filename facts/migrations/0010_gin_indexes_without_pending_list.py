"""GIN indexes without a pending list (core.lib.migrations.gin_pending_list_off)."""

import django.contrib.postgres.indexes
from django.db import migrations

from core.lib.migrations import gin_pending_list_off


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_llm_job_defer"),
        ("episodes", "0009_episodeembedding_episode_emb_mpnet_hnsw"),
        ("facts", "0009_review"),
        ("identities", "0004_people_trigram_indexes"),
        ("threads", "0007_messageembedding_msg_emb_mpnet_hnsw"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name="fact",
                    name="facts_search_fts",
                ),
                migrations.RemoveIndex(
                    model_name="factkey",
                    name="facts_key_dictionary_trgm",
                ),
                migrations.AddIndex(
                    model_name="fact",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False, fields=["search_vector"], name="facts_search_fts"
                    ),
                ),
                migrations.AddIndex(
                    model_name="factkey",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False,
                        fields=["key_normalized"],
                        name="facts_key_dictionary_trgm",
                        opclasses=["gin_trgm_ops"],
                    ),
                ),
            ],
            database_operations=[
                gin_pending_list_off("facts_search_fts", "facts_key_dictionary_trgm"),
            ],
        ),
    ]
