"""A GIN index of the items' values (jsonb_path_ops), for `value @>`.

A search's value filter (LangGraph's `search(prefix, filter=...)`) tested each item under the
prefix. Under a prefix of 1,000 items or more, its equalities now also say `value @>` the pairs
they imply, which this index answers: at 100,000 items, a filter across every person's memories
that 1 % match went from 24 to 5.5 ms p50 over the API, one nothing matches from 22 to 3 ms. A
put pays about 0.1 ms for a small value, 0.4-0.5 ms for one of 200 values (docs/speed.md, "The
store searched by value"). Built concurrently: puts go on while a large table is indexed. No row
changes.
"""

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import migrations

from core.lib.migrations import AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("store", "0004_storeitemembedding_in_graph"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="storeitem",
            index=GinIndex(OpClass("value", name="jsonb_path_ops"), fastupdate=False, name="store_item_value"),
        ),
    ]
