"""A partial index of the entries by their first source message.

An entry taken from a conversation records the messages it came from. The search's neighbour
term lifts an entry when the entries of the turns around its message rank well, and finds
them by this index (`episodic.selectors._ENTRY_SOURCES_SQL`; docs/episodic.md, "Issue 19:
the turns around an entry's message"). Entries without a source are not in it, so adds
without one pay nothing. Built concurrently: adds go on while a large table is indexed.
"""

import django.db.models.fields.json
import django.db.models.lookups
from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodic", "0009_entry_closed_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="episodicentry",
            index=models.Index(
                django.db.models.fields.json.KeyTextTransform("0", "source_message_ids"),
                condition=models.Q(
                    django.db.models.lookups.IsNull(
                        django.db.models.fields.json.KeyTextTransform("0", "source_message_ids"), False
                    )
                ),
                name="episodes_entry_first_source",
            ),
        ),
    ]
