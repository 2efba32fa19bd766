"""System checks of the database the project runs on (`manage.py check --database default`;
`migrate` runs them before migrating)."""

from django.core.checks import Tags, Warning, register
from django.db import DatabaseError, connections

from core.lib.migrations import invalid_indexes

INVALID_INDEX = "core.W001"


@register(Tags.database)
def invalid_indexes_check(app_configs=None, databases=None, **kwargs):
    """An index left invalid by an interrupted concurrent build: never read, perhaps still written."""
    warnings = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        try:
            found = invalid_indexes(connection)
        except DatabaseError:
            continue  # Not reachable: Django's own checks and the command itself say so.
        warnings.extend(
            Warning(
                f"Index {index} on {table} is invalid: a concurrent build or rebuild of it was "
                "interrupted. No query reads it, and writes may still maintain it.",
                hint=(
                    "Run `python manage.py migrate` if a migration is pending (it builds such an "
                    "index again), then `python manage.py rebuild_invalid_indexes`."
                ),
                obj=f"{alias}: {index}",
                id=INVALID_INDEX,
            )
            for index, table in found
        )
    return warnings
