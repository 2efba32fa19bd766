"""Migration operations shared by the tier apps' migrations.

Kept stable: migrations import it, so a change here changes how every past migration runs.
On a database in the state a migration expects, `AddIndexConcurrently` does what Django's does
and `InvalidIndexDrop` nothing; what they add is for the states an interrupted run leaves (below).
"""

import re

from django.contrib.postgres import operations as postgres_operations
from django.db import migrations
from django.db.migrations.operations.base import Operation

_SET_ACTION = """
DO $$
DECLARE constraint_name text;
BEGIN
    SELECT con.conname INTO STRICT constraint_name
    FROM pg_constraint con
    JOIN pg_attribute att ON att.attrelid = con.conrelid AND att.attnum = ANY (con.conkey)
    WHERE con.conrelid = '{table}'::regclass AND con.contype = 'f' AND att.attname = '{column}';
    EXECUTE format('ALTER TABLE {table} DROP CONSTRAINT %I', constraint_name);
    -- NOT VALID, then VALIDATE. Both run in the migration's one transaction, after a DROP
    -- that locks the table until commit, so this spares nothing while it runs: on large
    -- tables run these migrations in a quiet window (docs/deploy.md, Upgrades).
    EXECUTE format(
        'ALTER TABLE {table} ADD CONSTRAINT %I FOREIGN KEY ({column}) REFERENCES {target} (id)'
        ' {action} DEFERRABLE INITIALLY DEFERRED NOT VALID',
        constraint_name
    );
    EXECUTE format('ALTER TABLE {table} VALIDATE CONSTRAINT %I', constraint_name);
END $$;
"""


def foreign_key_cascade(*, table: str, column: str, target: str) -> migrations.RunSQL:
    """Make the database itself delete `table`'s rows when their `target` row is deleted.

    Django's CASCADE runs in Python from a snapshot: a row inserted by another transaction
    that commits while the delete waits for the target's row lock (an embedding written by a
    worker) is not seen, and the deferred foreign key check then fails the whole delete at
    commit. A database ON DELETE CASCADE runs after the lock is granted and sees that row.
    The model keeps on_delete=CASCADE, so Django's state is unchanged.
    """
    return migrations.RunSQL(
        _SET_ACTION.format(table=table, column=column, target=target, action="ON DELETE CASCADE"),
        reverse_sql=_SET_ACTION.format(table=table, column=column, target=target, action=""),
    )


def gin_pending_list_off(*indexes: str) -> migrations.RunSQL:
    """Turn fastupdate off on GIN `indexes`, in place (no rebuild), and merge their pending lists.

    With fastupdate on (PostgreSQL's default) a GIN index collects new rows in a pending list
    that every search reads in full until VACUUM, autoanalyze or the 4 MB limit merges it:
    after 20,000 inserts into a 100,000-entry table an episodic search took 69.5 ms instead
    of 47.1 (docs/speed.md). With it off new rows go straight into the index. Only index
    options change; no row is touched.
    """
    return migrations.RunSQL(
        sql=[
            *(f"ALTER INDEX {name} SET (fastupdate = off)" for name in indexes),
            *(f"SELECT gin_clean_pending_list('{name}'::regclass)" for name in indexes),
        ],
        reverse_sql=[f"ALTER INDEX {name} RESET (fastupdate)" for name in indexes],
    )


# A concurrent index build that fails or is interrupted (a deploy killed mid-migration, a lock
# or statement timeout, a duplicate under a unique index) leaves the index behind, INVALID: no
# query reads it, writes may still maintain it, and its name is taken. The migration is not
# recorded, so `migrate` runs it again and then fails on the name ("relation already exists"),
# or, with IF NOT EXISTS, succeeds and keeps the invalid index for good. PostgreSQL's advice is
# to drop it and build again; the operations below do that first.
#
# A migration of several such steps (build a new index, drop the old one, rename the new) can
# also stop between two of them, with the build done: run again, it finds its index there and
# valid. `AddIndexConcurrently` then keeps it if it is the very index it would build, so the
# migration goes on from the next step.

# An index still being built concurrently (by another migrate, or an operator's REINDEX, whose
# copy is named `..._ccnew`) is invalid too until its build ends. The invalid indexes of a table
# with a build in progress are left alone, neither reported nor dropped, until it ends.
_INVALID_INDEXES_SQL = """
    SELECT c.relname, t.relname FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_class t ON t.oid = i.indrelid
    WHERE c.relnamespace = current_schema()::regnamespace AND NOT i.indisvalid
    AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.relid = i.indrelid)
"""


def invalid_indexes(connection, *, name: str | None = None) -> list[tuple[str, str]]:
    """(index, table) of this schema's invalid indexes (or only the one named `name`), by name."""
    sql = _INVALID_INDEXES_SQL + (" AND c.relname = %s" if name else "") + " ORDER BY 1"
    with connection.cursor() as cursor:
        cursor.execute(sql, [name] if name else [])
        return [(index, table) for index, table in cursor.fetchall()]


def invalid_index_drop(schema_editor, name: str) -> bool:
    """Drop index `name` if an interrupted concurrent build left it invalid; say whether it did.

    A valid index of that name is left alone (its build then fails as it would have).
    """
    if not invalid_indexes(schema_editor.connection, name=name):
        return False
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")
    return True


_INDEX_DEFINITION_SQL = """
    SELECT t.relname, pg_get_indexdef(c.oid) FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_class t ON t.oid = i.indrelid
    WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace AND i.indisvalid
"""
# "CREATE [UNIQUE] INDEX <name> ON <schema>.<table> <the rest>": the rest is what the index is.
_DEFINITION = re.compile(r"^CREATE (UNIQUE )?INDEX \S+ ON \S+ (.*)$", re.DOTALL)
_PROBE = "core_index_probe"


def _what_index(definition: str) -> tuple:
    match = _DEFINITION.match(definition)
    return (bool(match.group(1)), match.group(2)) if match else (None, definition)


def index_built(schema_editor, model, index) -> bool:
    """Whether a valid index named as `index` already is exactly `index` on `model`'s table.

    PostgreSQL writes both definitions, so they compare alike however they were spelled: the
    index is built once more on an empty temporary copy of the table's columns, and the two
    definitions are compared but for the names.
    """
    connection = schema_editor.connection
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(_INDEX_DEFINITION_SQL, [index.name])
        row = cursor.fetchone()
        if row is None or row[0] != table:
            return False
        statement = index.create_sql(model, schema_editor)
        statement.rename_table_references(table, _PROBE)
        statement.parts["name"] = schema_editor.quote_name(f"{_PROBE}_index")
        cursor.execute(f"CREATE TEMPORARY TABLE {_PROBE} (LIKE {schema_editor.quote_name(table)})")
        try:
            cursor.execute(str(statement))
            cursor.execute("SELECT pg_get_indexdef(%s::regclass)", [f"pg_temp.{_PROBE}_index"])
            probe = cursor.fetchone()[0]
        finally:
            cursor.execute(f"DROP TABLE IF EXISTS pg_temp.{_PROBE}")
    return _what_index(probe) == _what_index(row[1])


class AddIndexConcurrently(postgres_operations.AddIndexConcurrently):
    """Django's, after dropping what an interrupted build of the same index left behind; and
    nothing when that build had finished (the same index is there, valid)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._ensure_not_in_transaction(schema_editor)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            left_invalid = invalid_index_drop(schema_editor, self.index.name)
            if not left_invalid and index_built(schema_editor, model, self.index):
                return
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class InvalidIndexDrop(Operation):
    """Drop index `name` if left invalid, before a `RunSQL` that builds it concurrently.

    Put it in the same non-atomic migration, just before the build. No state changes.
    """

    reduces_to_sql = False
    reversible = True

    def __init__(self, name: str):
        self.name = name

    def deconstruct(self):
        return self.__class__.__qualname__, [self.name], {}

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        invalid_index_drop(schema_editor, self.name)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        pass

    def describe(self):
        return f"Drop index {self.name} if an interrupted concurrent build left it invalid"
