"""GIN indexes without a pending list: identities_external_trgm, identities_user_names_trgm.

New rows go straight into the index (fastupdate off). With fastupdate on (PostgreSQL's
default) a GIN index collects new rows in a pending list that every search reads in full
until VACUUM or the 4 MB limit merges it: after 20,000 inserts into a 100,000-entry table an
episodic search took 69.5 ms instead of 47.1 (docs/speed.md). ALTER INDEX changes the
setting in place (no rebuild); the pending list already there is merged at once. Only the
index options change: no row is touched.
"""

import django.contrib.postgres.indexes
import django.db.models.functions.text
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_llm_job_defer"),
        ("identities", "0004_people_trigram_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name="channelidentity",
                    name="identities_external_trgm",
                ),
                migrations.RemoveIndex(
                    model_name="memoryuser",
                    name="identities_user_names_trgm",
                ),
                migrations.AddIndex(
                    model_name="channelidentity",
                    index=django.contrib.postgres.indexes.GinIndex(
                        django.contrib.postgres.indexes.OpClass(
                            django.db.models.functions.text.Upper("external_id"), name="gin_trgm_ops"
                        ),
                        fastupdate=False,
                        name="identities_external_trgm",
                    ),
                ),
                migrations.AddIndex(
                    model_name="memoryuser",
                    index=django.contrib.postgres.indexes.GinIndex(
                        django.contrib.postgres.indexes.OpClass(
                            django.db.models.functions.text.Upper("display_name"), name="gin_trgm_ops"
                        ),
                        django.contrib.postgres.indexes.OpClass(
                            django.db.models.functions.text.Upper("canonical_id"), name="gin_trgm_ops"
                        ),
                        fastupdate=False,
                        name="identities_user_names_trgm",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=[
                        "ALTER INDEX identities_external_trgm SET (fastupdate = off)",
                        "ALTER INDEX identities_user_names_trgm SET (fastupdate = off)",
                        "SELECT gin_clean_pending_list('identities_external_trgm'::regclass)",
                        "SELECT gin_clean_pending_list('identities_user_names_trgm'::regclass)",
                    ],
                    reverse_sql=[
                        "ALTER INDEX identities_external_trgm RESET (fastupdate)",
                        "ALTER INDEX identities_user_names_trgm RESET (fastupdate)",
                    ],
                ),
            ],
        ),
    ]
