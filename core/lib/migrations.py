"""Migration operations shared by the tier apps' migrations.

Kept small and stable: migrations import it, so a change here changes history.
"""

from django.db import migrations

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
