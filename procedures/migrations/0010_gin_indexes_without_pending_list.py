"""GIN indexes without a pending list: procedures_search_fts.

New rows go straight into the index (fastupdate off). With fastupdate on (PostgreSQL's
default) a GIN index collects new rows in a pending list that every search reads in full
until VACUUM or the 4 MB limit merges it: after 20,000 inserts into a 100,000-entry table an
episodic search took 69.5 ms instead of 47.1 (docs/speed.md). ALTER INDEX changes the
setting in place (no rebuild); the pending list already there is merged at once. Only the
index options change: no row is touched.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_llm_job_defer"),
        ("procedures", "0009_procedurerun_by_person"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name="procedure",
                    name="procedures_search_fts",
                ),
                migrations.AddIndex(
                    model_name="procedure",
                    index=django.contrib.postgres.indexes.GinIndex(
                        django.contrib.postgres.search.SearchVector("search_text", config="english"),
                        fastupdate=False,
                        name="procedures_search_fts",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=[
                        "ALTER INDEX procedures_search_fts SET (fastupdate = off)",
                        "SELECT gin_clean_pending_list('procedures_search_fts'::regclass)",
                    ],
                    reverse_sql=[
                        "ALTER INDEX procedures_search_fts RESET (fastupdate)",
                    ],
                ),
            ],
        ),
    ]
