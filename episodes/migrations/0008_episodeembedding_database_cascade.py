"""The database deletes an episode's vectors with it (see core.lib.migrations).

A migration of its own: the foreign key 0007 creates is added only as that migration ends.
"""

from django.db import migrations

from core.lib.migrations import foreign_key_cascade


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0007_episode_embedding"),
    ]

    operations = [
        foreign_key_cascade(table="episodes_episodeembedding", column="episode_id", target="episodes_episode"),
    ]
