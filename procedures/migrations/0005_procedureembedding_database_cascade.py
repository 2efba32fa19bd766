"""The database deletes a procedure's vectors with the procedure (see core.lib.migrations)."""

from django.db import migrations

from core.lib.migrations import foreign_key_cascade


class Migration(migrations.Migration):
    dependencies = [
        ("procedures", "0004_procedure_procedures_recent"),
    ]

    operations = [
        foreign_key_cascade(
            table="procedures_procedureembedding", column="procedure_id", target="procedures_procedure"
        ),
    ]
