"""The review queue (docs/review.md): every existing row is approved (db_default), nothing changes meaning."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_auditevent_txid"),
        ("facts", "0008_source_episode_learned_facts"),
    ]

    operations = [
        migrations.AddField(
            model_name="fact",
            name="review",
            field=models.CharField(
                choices=[
                    ("approved", "Approved"),
                    ("held", "Held for review"),
                    ("rejected", "Rejected in review"),
                    ("merged", "Merged into another fact in review"),
                ],
                db_default="approved",
                default="approved",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="fact",
            name="review_agent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="core.agent",
            ),
        ),
        migrations.AddField(
            model_name="fact",
            name="review_note",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="fact",
            name="reviewed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="fact",
            name="reviewed_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(
                condition=models.Q(("review", "held")),
                fields=["workspace", "-created_at"],
                name="facts_review",
            ),
        ),
    ]
