"""Trigram indexes for substring search of people (names, canonical and channel ids).

`q` on the users tab and the header search is `UPPER(col) LIKE UPPER('%text%')`: no btree
serves it, so every search read every person (bench.browser_search --recommended-indexes:
the search's worst case p95 120 -> 69 ms at 100,000 rows per tier). pg_trgm is enabled by
core 0001. Built concurrently: people are identified on every turn while a large table is
indexed.
"""

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import migrations
from django.db.models.functions import Upper

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("core", "0001_initial"),
        ("identities", "0003_memoryuser_legal_hold"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="channelidentity",
            index=GinIndex(OpClass(Upper("external_id"), name="gin_trgm_ops"), name="identities_external_trgm"),
        ),
        AddIndexConcurrently(
            model_name="memoryuser",
            index=GinIndex(
                OpClass(Upper("display_name"), name="gin_trgm_ops"),
                OpClass(Upper("canonical_id"), name="gin_trgm_ops"),
                name="identities_user_names_trgm",
            ),
        ),
    ]
