"""GIN indexes without a pending list (core.lib.migrations.gin_pending_list_off)."""

import django.contrib.postgres.indexes
from django.db import migrations

from core.lib.migrations import gin_pending_list_off


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_llm_job_defer"),
        ("episodic", "0006_entryembedding_entry_emb_mpnet_hnsw"),
        ("identities", "0004_people_trigram_indexes"),
        ("threads", "0007_messageembedding_msg_emb_mpnet_hnsw"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name="episodicentry",
                    name="episodes_entry_search",
                ),
                migrations.AddIndex(
                    model_name="episodicentry",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False, fields=["search_vector"], name="episodes_entry_search"
                    ),
                ),
            ],
            database_operations=[
                gin_pending_list_off("episodes_entry_search"),
            ],
        ),
    ]
