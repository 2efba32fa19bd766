"""The database deletes entries' and messages' vectors with their rows (see core.lib.migrations)."""

from django.db import migrations

from core.lib.migrations import foreign_key_cascade


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0004_episode_search_tsv"),
        ("threads", "0003_message_search_tsv"),
    ]

    operations = [
        foreign_key_cascade(
            table="episodes_entryembedding", column="entry_id", target="episodes_episodicentry"
        ),
        foreign_key_cascade(table="episodes_messageembedding", column="message_id", target="threads_message"),
    ]
