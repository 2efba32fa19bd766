"""GIN indexes without a pending list: episodes_entry_search.

New rows go straight into the index (fastupdate off). With fastupdate on (PostgreSQL's
default) a GIN index collects new rows in a pending list that every search reads in full
until VACUUM or the 4 MB limit merges it: after 20,000 inserts into a 100,000-entry table an
episodic search took 69.5 ms instead of 47.1 (docs/speed.md). ALTER INDEX changes the
setting in place (no rebuild); the pending list already there is merged at once. Only the
index options change: no row is touched.
"""

import django.contrib.postgres.indexes
from django.db import migrations


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
                migrations.RunSQL(
                    sql=[
                        "ALTER INDEX episodes_entry_search SET (fastupdate = off)",
                        "SELECT gin_clean_pending_list('episodes_entry_search'::regclass)",
                    ],
                    reverse_sql=[
                        "ALTER INDEX episodes_entry_search RESET (fastupdate)",
                    ],
                ),
            ],
        ),
    ]
