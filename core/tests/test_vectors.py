"""Every vector table keeps new rows out of its HNSW graphs (core.lib.vectors)."""

from django.apps import apps
from django.db import connection

from core.lib.local_models import LOCAL_MODELS


def _vector_models() -> list:
    return [m for m in apps.get_models() if any(f.name == "in_graph" for f in m._meta.concrete_fields)]


def test_every_vector_table_stores_new_rows_outside_the_graph(db):
    tables = {m._meta.db_table for m in _vector_models()}
    assert tables == {
        "episodes_entryembedding",
        "episodes_messageembedding",
        "episodes_episodeembedding",
        "store_storeitemembedding",
    }
    with connection.cursor() as cursor:
        for table in sorted(tables):
            cursor.execute(
                "SELECT column_default, is_nullable FROM information_schema.columns "
                "WHERE table_name = %s AND column_name = 'in_graph'",
                [table],
            )
            assert cursor.fetchone() == ("false", "NO"), table


def test_every_hnsw_index_covers_only_rows_in_the_graph(db):
    """One partial index per local model and vector table, each over flagged rows: a graph
    over every row would make each insert pay for it again."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
            "JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'hnsw'"
        )
        indexes = cursor.fetchall()
    by_table = {}
    for name, definition in indexes:
        assert "WHERE" in definition and "in_graph" in definition.split("WHERE", 1)[1], name
        table = definition.split(" ON ", 1)[1].split()[0].split(".")[-1]
        by_table[table] = by_table.get(table, 0) + 1
    assert by_table == {m._meta.db_table: len(LOCAL_MODELS) for m in _vector_models()}


def test_every_vector_table_finds_its_rows_outside_the_graph_by_index(db):
    """The HNSW plan sorts a scope's rows outside the graph exactly; without a B-tree over
    just those rows it would read every row of the scope to check its flag (5,000 heap pages
    for a person of 5,000 entries, docs/speed.md)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.tablename FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
            "JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'btree' AND i.indexdef LIKE %s",
            ["%WHERE (NOT in_graph)"],
        )
        tables = sorted(row[0] for row in cursor.fetchall())
    assert tables == sorted(m._meta.db_table for m in _vector_models())
