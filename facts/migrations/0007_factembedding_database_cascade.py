"""The database deletes a fact's vectors with the fact (see core.lib.migrations)."""

from django.db import migrations

from core.lib.migrations import foreign_key_cascade


class Migration(migrations.Migration):
    dependencies = [
        ("facts", "0006_drop_unused_key_trgm"),
    ]

    operations = [
        foreign_key_cascade(table="facts_factembedding", column="fact_id", target="facts_fact"),
    ]
