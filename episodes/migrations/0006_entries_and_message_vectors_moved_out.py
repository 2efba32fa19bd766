"""Episodic entries moved to the episodic app and message vectors to threads: state only.

No table, row or index changes (episodic 0001 and threads 0004 take the models over under
the same table names). The content types follow the models, so admin history and
permissions stay attached to them.
"""

from django.db import migrations

MOVED = {"episodicentry": "episodic", "entryembedding": "episodic", "messageembedding": "threads"}


def content_types_forward(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        # A content type already created under the new label (by a partial earlier run)
        # wins; the old one would otherwise collide with it on (app_label, model).
        if not content_type.objects.filter(app_label=app_label, model=model).exists():
            content_type.objects.filter(app_label="episodes", model=model).update(app_label=app_label)


def content_types_backward(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        if not content_type.objects.filter(app_label="episodes", model=model).exists():
            content_type.objects.filter(app_label=app_label, model=model).update(app_label="episodes")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("episodes", "0005_embeddings_database_cascade"),
        ("episodic", "0001_initial"),
        ("threads", "0004_message_embedding_moved_in"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="EntryEmbedding"),
                migrations.DeleteModel(name="MessageEmbedding"),
                migrations.DeleteModel(name="EpisodicEntry"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_forward, content_types_backward),
    ]
