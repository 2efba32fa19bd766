"""A partial index of the entries search reads: active and approved, per (agent, person).

BM25 counts the documents of the searched scope; through the scope index that count read
every row from the table to check status and review (2,242 buffers for a 5,000-row scope,
6.1 of 8.6 ms). Over this index it is an index-only scan (bench.episodic_perf
--search-scales, docs/episodic.md Performance). Built concurrently: adds go on while a large
table is indexed.
"""

from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodic", "0004_review"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="episodicentry",
            index=models.Index(
                condition=models.Q(("review", "approved"), ("status", "active")),
                fields=["workspace", "agent", "memory_user", "-created_at"],
                name="episodes_entry_searchable",
            ),
        ),
    ]
