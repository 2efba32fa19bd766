"""A database built by the old layout (entries and message vectors in `episodes`) keeps
every row, index and constraint when it migrates to this one."""

from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from core.testing import migrate_to
from episodic.models import EntryEmbedding, EpisodicEntry
from identities.services import memory_user_create
from threads.models import MessageEmbedding
from threads.tests.factories import append, make_thread

OLD_LAYOUT = [
    ("episodes", "0005_embeddings_database_cascade"),
    ("episodic", None),
    ("threads", "0003_message_search_tsv"),
]
TABLES = ("episodes_episodicentry", "episodes_entryembedding", "episodes_messageembedding")
MOVED = {"episodicentry": "episodic", "entryembedding": "episodic", "messageembedding": "threads"}


def _schema() -> dict:
    """Every index and constraint definition of the moved tables, as PostgreSQL holds them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s)", [list(TABLES)]
        )
        indexes = sorted(cursor.fetchall())
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid::regclass::text = ANY(%s)",
            [list(TABLES)],
        )
        constraints = sorted(cursor.fetchall())
    return {"indexes": indexes, "constraints": constraints}


def _counts() -> dict:
    with connection.cursor() as cursor:
        counts = {}
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cursor.fetchone()[0]
    return counts


class MigrationFromEpisodesLayoutTests(TransactionTestCase):
    def setUp(self):
        self.executor = MigrationExecutor(connection)
        self.latest = self.executor.loader.graph.leaf_nodes()
        # Whatever happens below, the next test finds the database at the latest state.
        self.addCleanup(self._migrate, None)

    def _migrate(self, targets):
        migrate_to(targets)

    def test_rows_indexes_and_content_types_survive_the_move(self):
        workspace = workspace_create(name="Old layout")
        agent = agent_register(workspace=workspace, slug="support")
        person = memory_user_create(workspace=workspace, canonical_id="telegram:7", display_name="Ada")
        thread = make_thread(workspace=workspace, agent=agent, memory_user=person)
        messages = append(thread, ("user", "I moved to Lisbon."), ("assistant", "Noted."))
        schema_latest = _schema()
        # The layout the move produced, before the later episodic and threads migrations
        # (episodic 0003: validity; both add indexes to the moved tables later, e.g. 0006 / 0007).
        self._migrate(
            [("episodic", "0002_entry_source_agent_direct"), ("threads", "0004_message_embedding_moved_in")]
        )
        schema_moved = _schema()

        self._migrate(OLD_LAYOUT)
        old_apps = MigrationExecutor(connection).loader.project_state([t for t in OLD_LAYOUT if t[1]]).apps
        old_entry = old_apps.get_model("episodes", "EpisodicEntry")
        old_entry_vector = old_apps.get_model("episodes", "EntryEmbedding")
        old_message_vector = old_apps.get_model("episodes", "MessageEmbedding")
        entry = old_entry.objects.create(
            workspace_id=workspace.pk,
            agent_id=agent.pk,
            memory_user_id=person.pk,
            content="Ada moved to Lisbon.",
            content_hash="h",
            source="user_assertion",
            evidence="I moved to Lisbon.",
            source_thread_id=thread.pk,
        )
        scope = {"workspace_id": workspace.pk, "agent_id": agent.pk, "memory_user_id": person.pk}
        vector = {"model": "m", "dimensions": 3}
        old_entry_vector.objects.create(entry_id=entry.pk, embedding=[1, 0, 0], **vector, **scope)
        for message in messages:
            old_message_vector.objects.create(
                message_id=message.pk, thread_id=thread.pk, embedding=[0, 1, 0], **vector, **scope
            )
        # An old database's content types carry the old label (admin history points at them).
        ContentType.objects.filter(model__in=MOVED).delete()
        old_ids = {model: ContentType.objects.create(app_label="episodes", model=model).pk for model in MOVED}
        assert _schema() == schema_moved
        counts = _counts()
        assert counts == {
            "episodes_episodicentry": 1,
            "episodes_entryembedding": 1,
            "episodes_messageembedding": 2,
        }

        self._migrate(None)

        assert _counts() == counts
        assert _schema() == schema_latest
        moved = EpisodicEntry.objects.get(pk=entry.pk)
        assert moved.content == "Ada moved to Lisbon."
        # Validity (0003): an existing row is current and valid from its creation.
        assert moved.valid_from == moved.created_at and moved.valid_to is None
        assert moved.superseded_by_id is None and moved.times_confirmed == 0
        assert moved.source_thread_id == thread.pk
        assert moved.search_vector  # the generated column still fills
        assert EntryEmbedding.objects.get(entry=moved).dimensions == 3
        assert MessageEmbedding.objects.filter(thread=thread).count() == 2
        for model, app_label in MOVED.items():
            content_type = ContentType.objects.get(pk=old_ids[model])
            assert (content_type.app_label, content_type.model) == (app_label, model)

    def test_the_move_runs_no_sql(self):
        """Moving the models is bookkeeping only: no statement reaches the tables."""
        for app_label, name in [
            ("episodic", "0001_initial"),
            ("threads", "0004_message_embedding_moved_in"),
            ("episodes", "0006_entries_and_message_vectors_moved_out"),
        ]:
            migration = self.executor.loader.get_migration(app_label, name)
            state = self.executor.loader.project_state((app_label, name), at_end=False)
            with connection.schema_editor(collect_sql=True, atomic=False) as editor:
                for operation in migration.operations:
                    if operation.reduces_to_sql:
                        operation.database_forwards(app_label, editor, state, state.clone())
                statements = list(editor.collected_sql)
            assert statements == [], (app_label, name, statements)
