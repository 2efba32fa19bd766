"""`compaction_checked_at` becomes the thread's `last_activity_at` a compaction saw, compared
for equality (retention), instead of a worker's clock compared as a time. A row checked after
its thread's last append by the old rule keeps counting as checked: its value is set to that
`last_activity_at`. A row checked before it keeps its value, which never equals it, so
retention asks for it as before. A thread whose last append came from a host whose clock ran
behind the check's cannot be told apart from a checked one here: it is asked again at its next
append, as it was before this migration.

Not atomic: each chunk of rows, walked once in key order, is its own short statement that
commits by itself, so an append waits for at most one chunk's locks. Run again after a failure,
it finds only the rows not yet turned. Reversing changes nothing (an equal value is also "at or
after" under the old rule), and no other column or row is touched.
"""

import uuid

from django.db import migrations

# Rows a statement walks: short statements on tables appends lock row by row.
BATCH = 1000

THREADS = """
WITH chunk AS (SELECT id FROM threads_thread WHERE id > %s ORDER BY id LIMIT %s),
turned AS (
    UPDATE threads_thread AS thread SET compaction_checked_at = thread.last_activity_at
    FROM chunk
    WHERE thread.id = chunk.id AND thread.compaction_checked_at > thread.last_activity_at
)
SELECT (SELECT id FROM chunk ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM chunk)
"""

NODES = """
WITH chunk AS (SELECT id FROM threads_nodesummary WHERE id > %s ORDER BY id LIMIT %s),
turned AS (
    UPDATE threads_nodesummary AS node SET compaction_checked_at = thread.last_activity_at
    FROM chunk, threads_thread AS thread
    WHERE node.id = chunk.id AND thread.id = node.thread_id
    AND node.compaction_checked_at > thread.last_activity_at
)
SELECT (SELECT id FROM chunk ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM chunk)
"""


def checked_as_activity(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for statement, start in ((THREADS, uuid.UUID(int=0)), (NODES, 0)):
            after = start
            while True:
                cursor.execute(statement, [after, BATCH])
                last, walked = cursor.fetchone()
                if walked < BATCH:
                    break
                after = last


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("threads", "0011_compaction_checked_at"),
    ]

    operations = [
        migrations.RunPython(checked_as_activity, migrations.RunPython.noop),
    ]
