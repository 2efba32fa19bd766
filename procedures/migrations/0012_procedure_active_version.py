"""One active version per lineage (workspace, agent, name): the partial unique index
procedures_active_version. Two activations that raced before it existed may have left a
lineage with several active versions; the newest of them (highest version number, the one an
evolution leaves active) stays active and the others are deactivated. No row is deleted.

Going back drops the index and leaves every row as it is."""

from django.db import migrations, models

# Ranks the active versions of each lineage, newest first; PARTITION BY groups the NULL agent
# of workspace-wide procedures as one lineage, as the index (NULLS NOT DISTINCT) does.
DEACTIVATE_DUPLICATES = """
UPDATE procedures_procedure AS p
   SET is_active = false, updated_at = now()
  FROM (
        SELECT id, row_number() OVER (
                   PARTITION BY workspace_id, agent_id, name ORDER BY version DESC, created_at DESC, id DESC
               ) AS rank
          FROM procedures_procedure
         WHERE is_active
       ) AS ranked
 WHERE p.id = ranked.id AND ranked.rank > 1
"""


class Migration(migrations.Migration):
    dependencies = [
        ("procedures", "0011_procedure_search_vector"),
    ]

    operations = [
        # Writers wait until the index exists: an activation committed between the clean-up
        # and the index build would make the build fail.
        migrations.RunSQL(
            "LOCK TABLE procedures_procedure IN SHARE ROW EXCLUSIVE MODE", reverse_sql=migrations.RunSQL.noop
        ),
        migrations.RunSQL(DEACTIVATE_DUPLICATES, reverse_sql=migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="procedure",
            constraint=models.UniqueConstraint(
                condition=models.Q(("is_active", True)),
                fields=("workspace", "agent", "name"),
                name="procedures_active_version",
                nulls_distinct=False,
            ),
        ),
    ]
