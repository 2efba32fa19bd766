"""Rebuild the indexes an interrupted concurrent build or rebuild left invalid (check core.W001)."""

import re

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from core.lib.migrations import invalid_indexes

# What an interrupted REINDEX CONCURRENTLY leaves beside the index it rebuilt (PostgreSQL's
# REINDEX, "Rebuilding Indexes Concurrently"): the half-built copy, or the old one not yet
# dropped. The index itself is valid; these are only to be dropped.
REINDEX_LEFTOVER = re.compile(r"_cc(?:new|old)\d*$")


class Command(BaseCommand):
    help = (
        "Rebuild, without blocking writes, every index of the database that an interrupted "
        "concurrent build left invalid (REINDEX INDEX CONCURRENTLY); drop the copies an "
        "interrupted REINDEX CONCURRENTLY left. Refuses while migrations are pending: `migrate` "
        "builds their indexes again itself."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--database",
            default=DEFAULT_DB_ALIAS,
            choices=tuple(connections),
            help="The database (default: default).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Only list what would be done.")

    def handle(self, *args, **options):
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            raise CommandError("Only PostgreSQL builds indexes concurrently.")
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            # The index may be one a pending migration builds: rebuilt here, it would take the
            # name that migration then fails on.
            names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in pending[:5])
            raise CommandError(f"Migrations are pending ({names}): run `python manage.py migrate` first.")
        found = invalid_indexes(connection)
        if not found:
            self.stdout.write("No invalid index.")
            return
        quote = connection.ops.quote_name
        failed = []
        for index, table in found:
            leftover = REINDEX_LEFTOVER.search(index) is not None
            if options["dry_run"]:
                self.stdout.write(f"Would {'drop' if leftover else 'rebuild'} {index} on {table}.")
                continue
            if leftover:
                sql, done = f"DROP INDEX CONCURRENTLY IF EXISTS {quote(index)}", "Dropped"
            else:
                sql, done = f"REINDEX INDEX CONCURRENTLY {quote(index)}", "Rebuilt"
            try:
                with connection.cursor() as cursor:
                    cursor.execute(sql)
            except DatabaseError as exc:
                failed.append(f"{index} on {table}: {str(exc).strip()}")
                self._copies_drop(connection, index)
                continue
            self.stdout.write(f"{done} {index} on {table}.")
        if failed:
            raise CommandError("Not rebuilt (it stays invalid):\n" + "\n".join(failed))

    def _copies_drop(self, connection, index: str) -> None:
        """Drop the half-built copy a failed REINDEX CONCURRENTLY of `index` left."""
        copy = re.compile(re.escape(index) + r"_ccnew\d*$")
        for name, _table in invalid_indexes(connection):
            if copy.match(name):
                with connection.cursor() as cursor:
                    cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {connection.ops.quote_name(name)}")
