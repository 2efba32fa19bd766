"""GIN indexes without a pending list: episodes_episode_search.

New rows go straight into the index (fastupdate off). With fastupdate on (PostgreSQL's
default) a GIN index collects new rows in a pending list that every search reads in full
until VACUUM or the 4 MB limit merges it: after 20,000 inserts into a 100,000-entry table an
episodic search took 69.5 ms instead of 47.1 (docs/speed.md). ALTER INDEX changes the
setting in place (no rebuild); the pending list already there is merged at once. The index
is created in SQL by an earlier migration, so the models' state is unchanged. Only the index
options change: no row is touched.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0009_episodeembedding_episode_emb_mpnet_hnsw"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[
                "ALTER INDEX episodes_episode_search SET (fastupdate = off)",
                "SELECT gin_clean_pending_list('episodes_episode_search'::regclass)",
            ],
            reverse_sql=["ALTER INDEX episodes_episode_search RESET (fastupdate)"],
        ),
    ]
