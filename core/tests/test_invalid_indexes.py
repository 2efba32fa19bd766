"""An index build interrupted (a deploy killed mid-migration, a timeout, a duplicate) leaves the
index INVALID under its name. `migrate` builds it again, the database check names what is
left, and `rebuild_invalid_indexes` repairs it (core.lib.migrations, core.checks)."""

import threading
import time
from io import StringIO

import pytest
from django.apps import apps
from django.core.checks import Tags, run_checks
from django.core.management import CommandError, call_command
from django.db import DatabaseError, IntegrityError, ProgrammingError, connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.checks import INVALID_INDEX
from core.lib.migrations import index_built
from core.management.commands.serve import Command as ServeCommand
from core.services import agent_register, workspace_create
from core.testing import migrate_to
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory

BEFORE_METADATA = [("episodic", "0012_entry_searchable_holds_id_and_source")]
BEFORE_PERSON_TERMS = [("episodic", "0010_entry_first_source_index")]
BEFORE_SEARCHABLE = [("episodic", "0011_entry_person_terms_index")]
SEARCHABLE = "0012_entry_searchable_holds_id_and_source"
TABLE = "core_test_invalid_index"


def _interrupted_build(index: str, table: str, column: str) -> None:
    """What an interrupted concurrent build leaves: a unique build over duplicates fails late."""
    with connection.cursor() as cursor, pytest.raises(IntegrityError):
        cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {index} ON {table} ({column})")
    assert _valid(index) is False


def _valid(index: str) -> bool | None:
    """The index's validity, or None when there is none of that name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            [index],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _definition(index: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index])
        return cursor.fetchone()[0]


def _steps_run(app: str, name: str, count: int) -> None:
    """The first `count` operations of migration `name`, as `migrate` runs them, and no more:
    a migration job stopped between two of its steps."""
    loader = MigrationExecutor(connection).loader
    migration = loader.get_migration(app, name)
    state = loader.project_state(migration.dependencies, at_end=True)
    for operation in migration.operations[:count]:
        after = state.clone()
        operation.state_forwards(app, after)
        with connection.schema_editor(atomic=False) as editor:
            operation.database_forwards(app, editor, state, after)
        state = after


def _command(*args) -> str:
    out = StringIO()
    call_command("rebuild_invalid_indexes", *args, stdout=out)
    return out.getvalue()


class InterruptedMigrationTests(TransactionTestCase):
    """The index's migration, run again, replaces what the interrupted build left."""

    def setUp(self):
        self.addCleanup(migrate_to)
        workspace = workspace_create(name="Interrupted builds")
        agent = agent_register(workspace=workspace, slug="support")
        person = memory_user_factory(workspace)
        # Two entries of one agent: a unique build on agent_id fails on them.
        for text in ("Ada moved to Lisbon.", "Ada likes tea."):
            entry_factory(agent=agent, memory_user=person, content=text, embed=False)
        self.stored = dict(EpisodicEntry.objects.values_list("pk", "content"))

    def test_an_index_added_concurrently_is_built_again(self):
        migrate_to(BEFORE_METADATA)
        _interrupted_build("episodes_entry_metadata", "episodes_episodicentry", "agent_id")

        # Before: "relation episodes_entry_metadata already exists", every later migration stuck.
        migrate_to()

        assert _valid("episodes_entry_metadata") is True
        assert "USING gin (metadata jsonb_path_ops)" in _definition("episodes_entry_metadata")
        assert dict(EpisodicEntry.objects.values_list("pk", "content")) == self.stored

    def test_an_index_built_by_sql_if_not_exists_is_built_again(self):
        migrate_to(BEFORE_PERSON_TERMS)
        _interrupted_build("episodes_entry_person_terms", "episodes_episodicentry", "agent_id")

        # Before: IF NOT EXISTS saw the name and kept the invalid index for good.
        migrate_to()

        assert _valid("episodes_entry_person_terms") is True
        assert "episodic_person_terms(memory_user_id, search_vector)" in _definition(
            "episodes_entry_person_terms"
        )
        assert dict(EpisodicEntry.objects.values_list("pk", "content")) == self.stored

    def test_a_migration_stopped_between_its_steps_goes_on_from_the_next(self):
        """episodic 0012 builds the new index, drops the old, renames the new: stopped after
        the first or the second step, it is run again to the end."""
        for done in (1, 2):
            with self.subTest(steps_done=done):
                migrate_to(BEFORE_SEARCHABLE)
                _steps_run("episodic", SEARCHABLE, done)
                assert _valid("episodes_entry_searchable_new") is True

                # Before: "relation episodes_entry_searchable_new already exists".
                migrate_to()

                assert _valid("episodes_entry_searchable_new") is None
                assert "INCLUDE (id, source)" in _definition("episodes_entry_searchable")
                assert dict(EpisodicEntry.objects.values_list("pk", "content")) == self.stored

    def test_every_index_of_the_models_is_recognised_as_built(self):
        """The comparison holds for every kind of index the project has (partial, INCLUDE,
        expressions, GIN operator classes, HNSW), and for none of them with another name's."""
        checked = 0
        with connection.schema_editor(atomic=False) as editor:
            for model in apps.get_models():
                for index in model._meta.indexes:
                    with self.subTest(index=index.name):
                        assert index_built(editor, model, index)
                    checked += 1
        assert checked > 40
        # The searchable index's name with the metadata index's definition.
        (metadata,) = (
            index for index in EpisodicEntry._meta.indexes if index.name == "episodes_entry_metadata"
        )
        other = metadata.clone()
        other.name = "episodes_entry_searchable"
        with connection.schema_editor(atomic=False) as editor:
            assert not index_built(editor, EpisodicEntry, other)

    def test_another_index_of_the_name_still_stops_the_migration(self):
        migrate_to(BEFORE_METADATA)
        with connection.cursor() as cursor:
            cursor.execute("CREATE INDEX episodes_entry_metadata ON episodes_episodicentry (agent_id)")
        self.addCleanup(self._index_drop, "episodes_entry_metadata")

        with pytest.raises(ProgrammingError, match="already exists"):
            migrate_to()

    def _index_drop(self, name):
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")

    def test_the_repair_waits_for_pending_migrations(self):
        migrate_to(BEFORE_METADATA)
        _interrupted_build("episodes_entry_metadata", "episodes_episodicentry", "agent_id")

        # Rebuilt here, the leftover would take the name the pending migration builds.
        with pytest.raises(CommandError, match=r"pending \(episodic\.0013_entry_metadata_index\).*migrate"):
            _command()
        assert _valid("episodes_entry_metadata") is False


class InvalidIndexRepairTests(TransactionTestCase):
    """The database check names every invalid index; the command rebuilds or drops each."""

    def setUp(self):
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {TABLE} (v integer)")
            cursor.execute(f"INSERT INTO {TABLE} VALUES (1), (1), (2)")
        self.addCleanup(self._drop_table)

    def _drop_table(self):
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")

    def _warnings(self):
        return [m for m in run_checks(tags=[Tags.database], databases=["default"]) if m.id == INVALID_INDEX]

    def test_the_check_names_each_invalid_index_and_nothing_else(self):
        assert self._warnings() == []
        _interrupted_build("core_test_v_unique", TABLE, "v")

        (warning,) = self._warnings()

        assert "core_test_v_unique on core_test_invalid_index is invalid" in warning.msg
        assert "rebuild_invalid_indexes" in warning.hint
        # `migrate` runs the database checks first: a deploy's log shows it.
        err = StringIO()
        call_command("migrate", verbosity=0, skip_checks=False, stdout=StringIO(), stderr=err)
        assert "core.W001" in err.getvalue()
        # So does `serve` (scripts/run) before it starts anything.
        err = StringIO()
        ServeCommand(stdout=StringIO(), stderr=err)._migrate()
        assert "core.W001" in err.getvalue()
        assert "core_test_v_unique" in err.getvalue()

    def test_an_invalid_index_is_rebuilt_without_blocking_writes(self):
        with connection.cursor() as cursor:
            # A build stopped by a row it cannot index (1 / 0), which is then deleted.
            with pytest.raises(DatabaseError, match="division by zero"):
                cursor.execute(f"CREATE INDEX CONCURRENTLY core_test_v ON {TABLE} ((1 / (v - 2)))")
            cursor.execute(f"DELETE FROM {TABLE} WHERE v = 2")

        assert _command("--dry-run") == "Would rebuild core_test_v on core_test_invalid_index.\n"
        assert _valid("core_test_v") is False

        assert _command() == "Rebuilt core_test_v on core_test_invalid_index.\n"
        assert _valid("core_test_v") is True
        assert self._warnings() == []
        assert _command() == "No invalid index.\n"

    def test_what_an_interrupted_rebuild_leaves_is_dropped(self):
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE INDEX core_test_v ON {TABLE} (v)")
        _interrupted_build("core_test_v_ccnew", TABLE, "v")

        assert _command() == "Dropped core_test_v_ccnew on core_test_invalid_index.\n"
        assert _valid("core_test_v_ccnew") is None
        assert _valid("core_test_v") is True

    def test_an_index_still_being_built_is_left_alone(self):
        """Invalid until its build ends: neither reported nor touched while it runs."""
        with connection.cursor() as cursor:
            # Immutable as far as PostgreSQL knows, and slow: the build takes seconds.
            cursor.execute(
                "CREATE FUNCTION core_test_slow(integer) RETURNS integer IMMUTABLE LANGUAGE plpgsql "
                "AS $$ BEGIN PERFORM pg_sleep(0.4); RETURN $1; END $$"
            )
        self.addCleanup(self._sql, "DROP FUNCTION IF EXISTS core_test_slow(integer) CASCADE")

        def build():
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"CREATE INDEX CONCURRENTLY core_test_slow_v ON {TABLE} (core_test_slow(v))"
                    )
            finally:
                connection.close()

        builder = threading.Thread(target=build)
        builder.start()
        try:
            deadline = time.monotonic() + 10
            while _valid("core_test_slow_v") is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _valid("core_test_slow_v") is False  # Being built.

            assert self._warnings() == []
            assert _command() == "No invalid index.\n"
        finally:
            builder.join()
        assert _valid("core_test_slow_v") is True

    def _sql(self, sql):
        with connection.cursor() as cursor:
            cursor.execute(sql)

    def test_an_unknown_database_is_refused(self):
        with pytest.raises(CommandError, match="invalid choice: 'nope'"):
            _command("--database", "nope")

    def test_a_rebuild_that_fails_says_which_index(self):
        # The leftover of a unique build over duplicates cannot be rebuilt until they go.
        _interrupted_build("core_test_v_unique", TABLE, "v")

        with pytest.raises(
            CommandError, match=r"(?s)core_test_v_unique on core_test_invalid_index: .*is duplicated"
        ):
            _command()
        assert _valid("core_test_v_unique") is False
        assert _valid("core_test_v_unique_ccnew") is None  # The failed rebuild's copy is gone.
