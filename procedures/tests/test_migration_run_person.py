"""Migrations 0007-0009 give every existing run its episode's person, batch by batch, and
lose no run either way."""

import importlib
from unittest import mock

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from core.testing import migrate_to
from episodes.services import episode_create
from identities.services import memory_user_create
from procedures.models import ProcedureRun
from procedures.tests.factories import ProcedureFactory

BEFORE = [("procedures", "0006_learning")]
FILL = importlib.import_module("procedures.migrations.0008_procedurerun_memory_user_fill")


class RunPersonMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_existing_runs_get_their_episodes_person_and_none_is_lost(self):
        workspace = workspace_create(name="Before runs had people")
        agent = agent_register(workspace=workspace, slug="support")
        ada = memory_user_create(workspace=workspace, canonical_id="ada")
        bob = memory_user_create(workspace=workspace, canonical_id="bob")
        procedure = ProcedureFactory(workspace=workspace)
        episodes = [
            episode_create(workspace=workspace, agent=agent, memory_user=person, trigger_type="chat")
            for person in (ada, bob, ada, None, bob)
        ]
        migrate_to(BEFORE)
        old_run = (
            MigrationExecutor(connection)
            .loader.project_state(BEFORE)
            .apps.get_model("procedures", "ProcedureRun")
        )
        for episode in episodes:
            old_run.objects.create(
                workspace_id=workspace.pk, procedure_id=procedure.pk, episode_id=episode.pk, success=True
            )
        with mock.patch.object(FILL, "BATCH", 2):  # three batches of primary keys
            migrate_to()
        owners = dict(ProcedureRun.objects.values_list("episode_id", "memory_user_id"))
        assert owners == {episode.pk: episode.memory_user_id for episode in episodes}
        migrate_to(BEFORE)
        assert old_run.objects.count() == len(episodes)
        migrate_to()
        assert ProcedureRun.objects.filter(memory_user__isnull=False).count() == 4
