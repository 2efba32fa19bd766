"""A partial index of the entries that are not active and approved, per (agent, person).

A batch add reads the person's stored vectors once to find each new item's nearest entry,
and only vectors of active, approved entries count. That state was read by a primary-key
probe of the entry for every vector (40 of 58 ms for a scope of 8,183 vectors); it is now
read as the scope's closed entries, which this index holds alone (docs/speed.md, "The
batch's scope read"). Built concurrently: adds go on while a large table is indexed.
"""

from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodic", "0008_entryembedding_in_graph"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="episodicentry",
            index=models.Index(
                condition=models.Q(("review", "approved"), ("status", "active"), _negated=True),
                fields=["agent", "memory_user"],
                name="episodes_entry_closed",
            ),
        ),
    ]
