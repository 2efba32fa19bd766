"""GIN indexes without a pending list (core.lib.migrations.gin_pending_list_off)."""

import django.contrib.postgres.indexes
import django.db.models.functions.text
from django.db import migrations

from core.lib.migrations import gin_pending_list_off


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
                gin_pending_list_off("identities_external_trgm", "identities_user_names_trgm"),
            ],
        ),
    ]
