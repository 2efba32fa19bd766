"""GIN indexes without a pending list (core.lib.migrations.gin_pending_list_off)."""

import django.contrib.postgres.indexes
from django.db import migrations

from core.lib.migrations import gin_pending_list_off


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_llm_job_defer"),
        ("identities", "0005_gin_indexes_without_pending_list"),
        ("store", "0002_storeitemembedding_store_item_emb_mpnet_hnsw"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name="storeitem",
                    name="store_item_search",
                ),
                migrations.AddIndex(
                    model_name="storeitem",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False, fields=["search_vector"], name="store_item_search"
                    ),
                ),
            ],
            database_operations=[
                gin_pending_list_off("store_item_search"),
            ],
        ),
    ]
