"""`compaction_checked_at` becomes the thread's `last_activity_at` a compaction saw, compared
for equality (retention), instead of a worker's clock compared as a time. Rows checked at or
after their thread's last append under the old rule keep counting as checked: their value is
set to that `last_activity_at`. Rows with an append since keep theirs, which never equals it,
so retention asks for them as before. Batch by batch; reversing changes nothing (an equal
value is also "at or after" under the old rule), and no other column or row is touched.
"""

from django.db import migrations

# Rows an UPDATE: short statements on a table appends lock row by row.
BATCH = 1000

THREADS = """
UPDATE threads_thread SET compaction_checked_at = last_activity_at
WHERE id IN (
    SELECT id FROM threads_thread
    WHERE compaction_checked_at > last_activity_at
    ORDER BY id LIMIT %s
)
"""

NODES = """
UPDATE threads_nodesummary AS node SET compaction_checked_at = thread.last_activity_at
FROM threads_thread AS thread
WHERE thread.id = node.thread_id AND node.id IN (
    SELECT node.id FROM threads_nodesummary AS node
    JOIN threads_thread AS thread ON thread.id = node.thread_id
    WHERE node.compaction_checked_at > thread.last_activity_at
    ORDER BY node.id LIMIT %s
)
"""


def checked_as_activity(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for statement in (THREADS, NODES):
            while True:
                cursor.execute(statement, [BATCH])
                if cursor.rowcount < BATCH:
                    break


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0011_compaction_checked_at"),
    ]

    operations = [
        migrations.RunPython(checked_as_activity, migrations.RunPython.noop),
    ]
