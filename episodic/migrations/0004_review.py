"""The review queue (docs/review.md): every existing row is approved (db_default), nothing changes meaning."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("episodic", "0003_entry_validity"),
    ]

    operations = [
        migrations.AddField(
            model_name="episodicentry",
            name="review",
            field=models.CharField(
                choices=[
                    ("approved", "Approved"),
                    ("held", "Held for review"),
                    ("rejected", "Rejected in review"),
                    ("merged", "Merged into another entry in review"),
                ],
                db_default="approved",
                default="approved",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="review_note",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="reviewed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="episodicentry",
            name="reviewed_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddIndex(
            model_name="episodicentry",
            index=models.Index(
                condition=models.Q(("review", "held")),
                fields=["workspace", "agent", "-created_at"],
                name="episodes_entry_review",
            ),
        ),
    ]
