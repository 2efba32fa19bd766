"""SummarizedMessage: the messages a summary holds alone, which retention may delete.

Retention used to compare a message's depth with its scope's summary depth, which deleted the
messages of other branches at those depths although no summary holds them. The rows are
filled here for every existing summary (the thread's, and each node's), as compaction marks
them: up the parent links from the summary's last message, within its scope, until a message
another branch also reads. A mark's foreign key cascades in the database (ON DELETE CASCADE,
checked at insert). Reversing drops the table; no message is touched either way.
"""

import django.db.models.deletion
from django.db import migrations, models

# Threads a statement: their summaries' chains are marked in one INSERT.
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
walk(id, parent_id, thread_id, node_id, depth, fork) AS (
    SELECT p.id, p.parent_id, p.thread_id, p.node_id, p.depth, EXISTS (
        SELECT 1 FROM threads_message c WHERE c.parent_id = p.id AND c.node_id = p.node_id AND c.id <> u.id
    )
    FROM src
    JOIN threads_message u
      ON u.id = src.upto AND u.thread_id = src.thread_id AND u.node_id = src.node_id AND u.depth = src.depth
    JOIN threads_message p ON p.id = u.parent_id AND p.node_id = u.node_id
  UNION ALL
    SELECT p.id, p.parent_id, p.thread_id, p.node_id, p.depth, EXISTS (
        SELECT 1 FROM threads_message c WHERE c.parent_id = p.id AND c.node_id = p.node_id AND c.id <> w.id
    )
    FROM walk w JOIN threads_message p ON p.id = w.parent_id AND p.node_id = w.node_id AND p.depth < w.depth
    WHERE NOT w.fork
)
INSERT INTO threads_summarizedmessage (message_id, thread_id, node_id, depth)
SELECT id, thread_id, node_id, depth FROM walk WHERE NOT fork
ON CONFLICT (message_id) DO NOTHING
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
        migrations.CreateModel(
            name="SummarizedMessage",
            fields=[
                (
                    "message",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="threads.message",
                    ),
                ),
                ("node_id", models.CharField(blank=True, max_length=100)),
                ("depth", models.IntegerField()),
                (
                    "thread",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="threads.thread",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["thread", "node_id", "depth"], name="threads_summarized_scope")],
            },
        ),
        # The mark goes with its message in the database itself, and is checked at its insert:
        # Django's deferred constraint refused, at commit, a deletion that had collected the
        # marks before a compaction committed one for a message it deletes.
        migrations.RunSQL(
            "ALTER TABLE threads_summarizedmessage ADD CONSTRAINT threads_summarized_message_fk "
            "FOREIGN KEY (message_id) REFERENCES threads_message (id) ON DELETE CASCADE",
            migrations.RunSQL.noop,
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
