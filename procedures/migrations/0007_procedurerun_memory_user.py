"""A run copies its episode's person, so the person page reads a person's runs by index
instead of joining every run to its episode. Nullable (an episode may have no person, and
rows are filled by 0008); the database deletes a run with its person, as it does with the
episode (core.lib.migrations.foreign_key_cascade)."""

import django.db.models.deletion
from django.db import migrations, models

from core.lib.migrations import foreign_key_cascade


class Migration(migrations.Migration):
    dependencies = [
        ("identities", "0004_people_trigram_indexes"),
        ("procedures", "0006_learning"),
    ]

    operations = [
        migrations.AddField(
            model_name="procedurerun",
            name="memory_user",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="identities.memoryuser",
            ),
        ),
        foreign_key_cascade(
            table="procedures_procedurerun", column="memory_user_id", target="identities_memoryuser"
        ),
    ]
