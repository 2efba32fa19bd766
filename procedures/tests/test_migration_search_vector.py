"""Migration 0011 stores procedures' tsvector and moves their full-text index onto it: every
row keeps every column, each gets its vector, and reversing it restores the expression index."""

from django.db import connection
from django.test import TransactionTestCase

from core.services import workspace_create
from core.testing import migrate_to
from procedures.tests.factories import ProcedureFactory

BEFORE = [("procedures", "0010_gin_indexes_without_pending_list")]
# Every column the table had at 0010, as text, per row.
ROWS_MD5_SQL = (
    "SELECT id, md5((row_to_json(p)::jsonb - 'search_vector')::text) FROM procedures_procedure p ORDER BY id"
)


def _rows() -> dict:
    with connection.cursor() as cursor:
        cursor.execute(ROWS_MD5_SQL)
        return dict(cursor.fetchall())


def _index_definition() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'procedures_search_fts'")
        return cursor.fetchone()[0]


class ProcedureSearchVectorMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_no_row_changes_every_row_gets_its_vector_and_it_reverses(self):
        workspace = workspace_create(name="Before the stored tsvector")
        for i in range(20):
            # search_text as the services write it (the factory leaves it empty).
            name = f"Reset password {i}"
            ProcedureFactory(
                workspace=workspace, name=name, content=f"Step {i}.", search_text=f"{name} Step {i}."
            )
        migrate_to(BEFORE)
        assert "to_tsvector" in _index_definition()
        before = _rows()
        assert len(before) == 20

        migrate_to()

        assert _rows() == before
        assert "(search_vector)" in _index_definition() and "fastupdate=off" in _index_definition()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM procedures_procedure WHERE search_vector @@ 'password'::tsquery"
            )
            assert cursor.fetchone()[0] == 20

        migrate_to(BEFORE)
        assert _rows() == before
        assert "to_tsvector" in _index_definition() and "fastupdate=off" in _index_definition()
