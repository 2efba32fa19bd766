"""GIN indexes without a pending list: facts_search_fts, facts_key_dictionary_trgm.

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
                migrations.RunSQL(
                    sql=[
                        "ALTER INDEX facts_search_fts SET (fastupdate = off)",
                        "ALTER INDEX facts_key_dictionary_trgm SET (fastupdate = off)",
                        "SELECT gin_clean_pending_list('facts_search_fts'::regclass)",
                        "SELECT gin_clean_pending_list('facts_key_dictionary_trgm'::regclass)",
                    ],
                    reverse_sql=[
                        "ALTER INDEX facts_search_fts RESET (fastupdate)",
                        "ALTER INDEX facts_key_dictionary_trgm RESET (fastupdate)",
                    ],
                ),
            ],
        ),
    ]
