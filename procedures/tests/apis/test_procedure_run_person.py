"""A procedure run carries its episode's person (the person page reads runs by it): written
by learning, moved by a merge, deleted by an erasure, derived on import."""

from django.core.cache import cache

from core.testing import MemoryTestCase
from identities.services import memory_user_create, memory_user_erase, memory_user_merge
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes
from procedures.models import ProcedureRun
from procedures.services import procedure_create

EPISODES = "/api/v1/episodes/"
LEARN = "/api/v1/procedures/learn/"


class ProcedureRunPersonTests(MemoryTestCase):
    def setUp(self):
        cache.clear()
        self.ada = memory_user_create(workspace=self.workspace, canonical_id="ada")
        self.ada_mail = memory_user_create(workspace=self.workspace, canonical_id="ada@example.com")
        self.taught = procedure_create(
            workspace=self.workspace, name="Refunds", procedure_type="prompt_template", content="Refund it."
        )

    def episode(self, memory_user, outcome="success"):
        body = {
            "agent": "assistant",
            "trigger_type": "chat",
            "input": {"goal": "Refund order 4411"},
            "outcome": outcome,
            "final_output": "Refunded",
            "memory_user": str(memory_user.pk) if memory_user else None,
            "trigger_payload": {"procedure_id": str(self.taught.pk)},
        }
        response = self.api().post(EPISODES, body, format="json")
        assert response.status_code == 201, response.json()
        return response.json()["id"]

    def learn(self):
        response = self.api().post(LEARN, {}, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def owners(self):
        return sorted(
            (str(episode), str(owner) if owner else None)
            for episode, owner in ProcedureRun.objects.values_list("episode_id", "memory_user_id")
        )

    def test_learning_copies_the_episodes_person_onto_each_run(self):
        ada_run = self.episode(self.ada)
        mail_run = self.episode(self.ada_mail, outcome="failure")
        nobody_run = self.episode(None)
        assert self.learn()["runs_counted"] == 3
        assert self.owners() == sorted(
            [(ada_run, str(self.ada.pk)), (mail_run, str(self.ada_mail.pk)), (nobody_run, None)]
        )

    def test_a_merge_moves_the_runs_with_the_episodes(self):
        self.episode(self.ada)
        self.episode(self.ada_mail)
        self.learn()
        memory_user_merge(source=self.ada_mail, target=self.ada, actor="test")
        assert set(ProcedureRun.objects.values_list("memory_user_id", flat=True)) == {self.ada.pk}
        assert ProcedureRun.objects.count() == 2

    def test_an_erasure_deletes_the_persons_runs_only(self):
        self.episode(self.ada)
        kept = self.episode(self.ada_mail)
        self.learn()
        counts = memory_user_erase(memory_user=self.ada, actor="test")
        assert "procedure_runs" not in counts  # a copy of the episodes', not counted twice
        assert self.owners() == [(kept, str(self.ada_mail.pk))]

    def test_an_import_derives_the_person_from_the_episode(self):
        self.episode(self.ada)
        self.learn()
        data = export_bytes(Scope(workspace=self.workspace))
        runs = [line for line in data.splitlines() if b'"procedure_run"' in line]
        assert len(runs) == 1 and b'"memory_user"' not in runs[0]
        report = import_bytes(self.other_workspace, data)
        assert report["created"]["procedure_run"] == 1, report
        run = ProcedureRun.objects.get(workspace=self.other_workspace)
        assert run.memory_user.canonical_id == "ada"
        assert run.memory_user.workspace_id == self.other_workspace.pk
