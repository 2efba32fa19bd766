"""GIN indexes without a pending list (core.lib.migrations.gin_pending_list_off).

The index is created in SQL by an earlier migration, so the models' state is unchanged.
"""

from django.db import migrations

from core.lib.migrations import gin_pending_list_off


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0007_messageembedding_msg_emb_mpnet_hnsw"),
    ]

    operations = [
        gin_pending_list_off("threads_message_search"),
    ]
