"""GIN indexes without a pending list (core.lib.migrations.gin_pending_list_off)."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations

from core.lib.migrations import gin_pending_list_off


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
                gin_pending_list_off("procedures_search_fts"),
            ],
        ),
    ]
