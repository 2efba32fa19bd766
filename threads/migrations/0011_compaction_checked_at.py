"""`compaction_checked_at` on threads and node summaries: when a compaction last read the
branch to the end, a summary written or nothing new found. Retention asks for a compaction
only of threads (and nodes) with an append since; an "up to date" answer left no trace but its
finished fair-queue job, kept a day, so such threads were asked again once a day.

Filled from `compacted_at` (a summary written then read the branch then too), batch by batch.
Reversing drops the columns; no other column or row is touched either way.
"""

from django.db import migrations, models

# Rows an UPDATE: short statements on a table appends lock row by row.
BATCH = 1000

FILL = """
UPDATE {table} SET compaction_checked_at = compacted_at
WHERE id IN (
    SELECT id FROM {table}
    WHERE compacted_at IS NOT NULL AND compaction_checked_at IS NULL
    ORDER BY id LIMIT %s
)
"""


def checked_from_compacted(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for table in ("threads_thread", "threads_nodesummary"):
            while True:
                cursor.execute(FILL.format(table=table), [BATCH])
                if cursor.rowcount < BATCH:
                    break


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0010_summarizedmessage"),
    ]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="compaction_checked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="nodesummary",
            name="compaction_checked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(checked_from_compacted, migrations.RunPython.noop),
    ]
