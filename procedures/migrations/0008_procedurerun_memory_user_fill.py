"""Fill ProcedureRun.memory_user from each run's episode, in batches of primary keys, each
batch its own short transaction (atomic = False), so a large table is never locked whole and
runs written meanwhile (already filled by the learner) are left alone. Backwards there is
nothing to undo: 0007's reverse drops the column."""

from django.db import migrations

BATCH = 10_000

_FILL = """
UPDATE procedures_procedurerun AS run
SET memory_user_id = episode.memory_user_id
FROM episodes_episode AS episode
WHERE run.episode_id = episode.id
  AND run.id >= %s AND run.id < %s
  AND run.memory_user_id IS NULL
  AND episode.memory_user_id IS NOT NULL
"""


def fill(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT min(id), max(id) FROM procedures_procedurerun")
        low, high = cursor.fetchone()
        if low is None:
            return
        for start in range(low, high + 1, BATCH):
            cursor.execute(_FILL, [start, start + BATCH])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodes", "0008_episodeembedding_database_cascade"),
        ("procedures", "0007_procedurerun_memory_user"),
    ]

    operations = [
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
