"""A GIN index on threads_message.search_tsv, for the /memories search across tiers.

Semantic recall reads one person's messages at a time and needed no index; the browser's
search matches the whole workspace's messages, which without one reads every message of the
table (bench/browser_search.py, 100,000 messages: p95 ~280 ms, with the index ~50 ms).
Partial: tool and system messages, and empty ones, have no tsvector, and a match (`@@`,
strict) implies a non-null one, so the planner uses it for every search.

`search_tsv` is a generated column outside the model (threads 0003), so the index is SQL,
built CONCURRENTLY (not in a transaction): appends go on while a large table is indexed.
"""

from django.db import migrations

from core.lib.migrations import InvalidIndexDrop

CREATE = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS threads_message_search "
    "ON threads_message USING gin (search_tsv) WHERE search_tsv IS NOT NULL"
)
DROP = "DROP INDEX CONCURRENTLY IF EXISTS threads_message_search"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("threads", "0005_node_summary_transfer"),
    ]

    # IF NOT EXISTS alone would keep an index an interrupted build left invalid.
    operations = [InvalidIndexDrop("threads_message_search"), migrations.RunSQL(CREATE, DROP)]
