"""Migration 0010 indexes entries by their first source message whatever was stored in
`source_message_ids`, and loses no row either way."""

import uuid

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from core.testing import migrate_to
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory

BEFORE = [("episodic", "0009_entry_closed_index")]
STORED = [
    [],
    [str(uuid.uuid4())],
    [str(uuid.uuid4()), str(uuid.uuid4())],
    ["not-a-uuid"],
    [12],
    [None],
    [{"id": "x"}],
    [["nested"]],
    {"an": "object"},
    "a string",
    7,
]


def _index_definition():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'episodes_entry_first_source'")
        row = cursor.fetchone()
    return row[0] if row else None


class FirstSourceIndexMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_every_stored_value_is_indexed_or_left_out_and_no_row_is_lost(self):
        workspace = workspace_create(name="Before the first source index")
        agent = agent_register(workspace=workspace, slug="support")
        person = memory_user_factory(workspace)
        migrate_to(BEFORE)
        assert _index_definition() is None
        old = (
            MigrationExecutor(connection)
            .loader.project_state(BEFORE)
            .apps.get_model("episodic", "EpisodicEntry")
        )
        for i, value in enumerate(STORED):
            entry = entry_factory(agent=agent, memory_user=person, content=f"note {i}", embed=False)
            old.objects.filter(pk=entry.pk).update(source_message_ids=value)
        before = dict(old.objects.values_list("pk", "source_message_ids"))

        migrate_to()

        assert "((source_message_ids ->> 0))" in _index_definition()
        assert "IS NOT NULL" in _index_definition()
        assert dict(EpisodicEntry.objects.values_list("pk", "source_message_ids")) == before
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM episodes_episodicentry WHERE (source_message_ids ->> 0) = %s",
                [STORED[2][0]],
            )
            assert cursor.fetchone()[0] == 1

        migrate_to(BEFORE)
        assert _index_definition() is None
        assert dict(old.objects.values_list("pk", "source_message_ids")) == before
