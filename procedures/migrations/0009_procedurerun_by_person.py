"""The person page's read of a person's runs: (memory_user, procedure), so "which procedures
did this person use" is an index-only scan and each procedure's probe one descent. Built
concurrently: episodes and learning passes go on while a large table is indexed."""

from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("procedures", "0008_procedurerun_memory_user_fill"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="procedurerun",
            index=models.Index(fields=["memory_user", "procedure"], name="procedures_run_by_person"),
        ),
    ]
