"""The searchable entries' index (0005) also holds each entry's id and source.

A filtered search keeps, for its vector channel, the ids of the person's entries that pass the
filter. Through the old index that read every entry of the person from the table (the index
had neither the id nor the source): at 5,000 entries a person, a one-day `created_after` took
10.3 ms p50 against 7.0 unfiltered. With `INCLUDE (id, source)` a time or source filter is an
index-only scan (7.4 ms; docs/speed.md, "A filtered search"). Built concurrently under a
temporary name, the old index dropped concurrently, then the new one takes its name: adds and
searches go on throughout, and there is always one such index. No row changes.
"""

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently

CONDITION = models.Q(("review", "approved"), ("status", "active"))
FIELDS = ["workspace", "agent", "memory_user", "-created_at"]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodic", "0011_entry_person_terms_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="episodicentry",
            index=models.Index(
                condition=CONDITION,
                fields=FIELDS,
                include=["id", "source"],
                name="episodes_entry_searchable_new",
            ),
        ),
        RemoveIndexConcurrently(model_name="episodicentry", name="episodes_entry_searchable"),
        migrations.RenameIndex(
            model_name="episodicentry",
            new_name="episodes_entry_searchable",
            old_name="episodes_entry_searchable_new",
        ),
    ]
