"""Validity of entries (consolidation): valid_from, valid_to, superseded_by, confirmations and
the decision record. No row is lost; existing rows are valid from their creation."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("episodic", "0002_entry_source_agent_direct"),
    ]

    operations = [
        migrations.AddField(
            model_name="episodicentry",
            name="valid_from",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="valid_to",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="superseded_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="supersedes",
                to="episodic.episodicentry",
            ),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="times_confirmed",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="last_confirmed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="consolidation",
            field=models.JSONField(blank=True, default=dict),
        ),
        # The default above stamped every existing row with the migration's time.
        migrations.RunSQL(
            "UPDATE episodes_episodicentry SET valid_from = created_at",
            reverse_sql=migrations.RunSQL.noop,
        ),
        # Entries superseded before validity existed: closed when they were last changed.
        migrations.RunSQL(
            "UPDATE episodes_episodicentry SET valid_to = updated_at WHERE status = 'superseded'",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
