"""Message.summary_held: the messages a summary holds alone, which retention may delete.

Retention used to compare a message's depth with its scope's summary depth, which deleted the
messages of other branches at those depths although no summary holds them. The column is
filled here for every existing summary (the thread's, and each node's), as compaction marks
it: up the parent links from the summary's last message, within its scope, until a message
another branch also reads. The database default fills every other row without rewriting the
table; reversing drops the column and keeps every row.
"""

from django.db import migrations, models

# Threads a statement: their summaries' chains are marked in one UPDATE.
BATCH = 500

FILL = """
WITH RECURSIVE src(upto, thread_id, node_id, depth) AS (
    SELECT t.summary_upto_id, t.id, '', t.summary_upto_depth FROM threads_thread t
    WHERE t.id = ANY(%(threads)s) AND t.summary_upto_id IS NOT NULL AND t.summary_upto_depth IS NOT NULL
  UNION ALL
    SELECT s.summary_upto_id, s.thread_id, s.node_id, s.summary_upto_depth FROM threads_nodesummary s
    WHERE s.thread_id = ANY(%(threads)s)
      AND s.summary_upto_id IS NOT NULL AND s.summary_upto_depth IS NOT NULL
),
walk(id, parent_id, node_id, depth, fork) AS (
    SELECT p.id, p.parent_id, p.node_id, p.depth, EXISTS (
        SELECT 1 FROM threads_message c WHERE c.parent_id = p.id AND c.node_id = p.node_id AND c.id <> u.id
    )
    FROM src
    JOIN threads_message u
      ON u.id = src.upto AND u.thread_id = src.thread_id AND u.node_id = src.node_id AND u.depth = src.depth
    JOIN threads_message p ON p.id = u.parent_id AND p.node_id = u.node_id
  UNION ALL
    SELECT p.id, p.parent_id, p.node_id, p.depth, EXISTS (
        SELECT 1 FROM threads_message c WHERE c.parent_id = p.id AND c.node_id = p.node_id AND c.id <> w.id
    )
    FROM walk w JOIN threads_message p ON p.id = w.parent_id AND p.node_id = w.node_id AND p.depth < w.depth
    WHERE NOT w.fork
)
UPDATE threads_message SET summary_held = true WHERE id IN (SELECT id FROM walk WHERE NOT fork)
"""

SUMMARIZED = """
SELECT id FROM threads_thread WHERE summary_upto_id IS NOT NULL AND id > %(after)s
UNION
SELECT thread_id FROM threads_nodesummary WHERE summary_upto_id IS NOT NULL AND thread_id > %(after)s
ORDER BY 1 LIMIT %(batch)s
"""


def fill(apps, schema_editor):
    after = "00000000-0000-0000-0000-000000000000"
    with schema_editor.connection.cursor() as cursor:
        while True:
            cursor.execute(SUMMARIZED, {"after": after, "batch": BATCH})
            threads = [row[0] for row in cursor.fetchall()]
            if not threads:
                return
            cursor.execute(FILL, {"threads": threads})
            after = threads[-1]


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0009_messageembedding_in_graph"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="summary_held",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
