"""Migration 0008 keeps every stored vector in the HNSW graph, and stores new ones outside it."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.embeddings import LOCAL_MODEL_NAME
from core.services import agent_register, workspace_create
from core.testing import migrate_to
from episodic.models import EntryEmbedding
from episodic.tests.factories import entry_factory, memory_user_factory

BEFORE = [("episodic", "0007_gin_indexes_without_pending_list")]


class InGraphMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_vectors_stored_before_stay_in_the_graph_and_none_is_lost(self):
        workspace = workspace_create(name="Before the graph flag")
        agent = agent_register(workspace=workspace, slug="support")
        person = memory_user_factory(workspace)
        entries = [entry_factory(agent=agent, memory_user=person, content=f"note {i}") for i in range(3)]
        migrate_to(BEFORE)
        old = (
            MigrationExecutor(connection)
            .loader.project_state(BEFORE)
            .apps.get_model("episodic", "EntryEmbedding")
        )
        for i, entry in enumerate(entries):
            old.objects.create(
                entry_id=entry.pk,
                workspace_id=workspace.pk,
                agent_id=agent.pk,
                memory_user_id=person.pk,
                model=LOCAL_MODEL_NAME,
                dimensions=384,
                embedding=[float(i + 1)] + [0.0] * 383,
            )
        stored = old.objects.count()
        assert stored >= 3
        migrate_to()
        assert list(EntryEmbedding.objects.values_list("in_graph", flat=True)) == [True] * stored
        new = entry_factory(agent=agent, memory_user=person, content="stored after")
        EntryEmbedding.objects.create(
            entry=new,
            workspace=workspace,
            agent=agent,
            memory_user=person,
            model=LOCAL_MODEL_NAME,
            dimensions=384,
            embedding=[0.0] * 383 + [1.0],
        )
        assert set(EntryEmbedding.objects.filter(entry=new).values_list("in_graph", flat=True)) == {False}
        total = EntryEmbedding.objects.count()
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'entry_emb_graph'")
            assert "in_graph" in cursor.fetchone()[0]
            cursor.execute(
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'episodes_entry_embedding_hnsw'"
            )
            assert cursor.fetchone()[0] == 0
        migrate_to(BEFORE)
        assert old.objects.count() == total
