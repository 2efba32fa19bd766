"""Properties of the migrated schema that every tier relies on."""

from django.db import connection
from django.test import TestCase

from core.services import agent_register, workspace_create
from episodic.services.creation import entry_create
from identities.services import memory_user_create

GIN_INDEXES_SQL = """
    SELECT i.relname, coalesce(i.reloptions, '{}')
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_am am ON am.oid = i.relam
    JOIN pg_namespace n ON n.oid = i.relnamespace
    WHERE am.amname = 'gin' AND n.nspname = current_schema()
"""


class GinIndexTests(TestCase):
    def test_every_gin_index_skips_the_pending_list(self):
        """A GIN index with fastupdate on (PostgreSQL's default) keeps new rows in a pending
        list that every search scans until VACUUM merges it: 20,000 fresh entries made an
        episodic search at 100,000 entries 48 % slower (docs/speed.md). Every GIN index of
        the schema, the search and the trigram ones, must be created or altered with
        fastupdate off, including any added later."""
        with connection.cursor() as cursor:
            cursor.execute(GIN_INDEXES_SQL)
            indexes = dict(cursor.fetchall())
        assert {"episodes_entry_search", "threads_message_search", "facts_search_fts"} <= set(indexes)
        assert {name: options for name, options in indexes.items() if "fastupdate=off" not in options} == {}

    def test_a_new_entry_goes_straight_into_the_index(self):
        with connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        workspace = workspace_create(name="Schema")
        agent = agent_register(workspace=workspace, slug="schema")
        person = memory_user_create(workspace=workspace, canonical_id="schema-person")
        entry_create(
            agent=agent, memory_user=person, content="Prefers window seats on long flights.", actor="test"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pending_pages, pending_tuples FROM pgstatginindex('episodes_entry_search')"
            )
            assert cursor.fetchone() == (0, 0)
