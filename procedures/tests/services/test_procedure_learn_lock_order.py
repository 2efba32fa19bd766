"""A learning pass that counts runs of two versions of one lineage, on one connection, and an
activation of that lineage on another: neither waits for the other in a cycle (PostgreSQL
would abort one as a deadlock), and every run is counted.

The activation locks every version of the lineage in key order (procedure_lineage_lock). The
pass updated the counters of the procedures its episodes name in the order it met the
episodes (newest first): the newer version, with the higher key, first, then the older one,
which the activation held while it waited for the newer one."""

import uuid
from datetime import timedelta
from unittest import mock

import psycopg
from django.core.cache import cache
from django.db import OperationalError, connection
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import agent_get_or_create, workspace_create
from episodes.services.records import episode_create
from procedures.models import Procedure, ProcedureRun
from procedures.services import learning, procedure_update, procedures_learn
from procedures.services.learning import NUDGE_KEY
from procedures.tests.factories import ProcedureFactory
from retention.tests.test_engine_append_race import Elsewhere


class LearningPassAndActivationTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        # The passes are run by the tests: the commits of these episodes queue none.
        cache.set(NUDGE_KEY.format(workspace_id=self.workspace.pk), 1, 600)
        self.addCleanup(cache.delete, NUDGE_KEY.format(workspace_id=self.workspace.pk))
        # The newer version has the higher key.
        low, high = sorted([uuid.uuid4(), uuid.uuid4()])
        self.older = ProcedureFactory(
            id=low, workspace=self.workspace, agent=self.agent, name="Refund", version=1, is_active=False
        )
        self.newer = ProcedureFactory(
            id=high, workspace=self.workspace, agent=self.agent, name="Refund", version=2, is_active=True
        )
        start = timezone.now() - timedelta(hours=1)
        # The newest episode names the newer version: the pass meets it first.
        for n, procedure in enumerate([self.older, self.older, self.newer]):
            episode_create(
                workspace=self.workspace,
                agent=self.agent,
                trigger_type="chat",
                trigger_payload={"procedure_id": str(procedure.pk)},
                input={"goal": f"Refund order {n}"},
                outcome="success",
                started_at=start + timedelta(minutes=n),
                ended_at=start + timedelta(minutes=n, seconds=30),
            )

    def activate_older(self):
        return procedure_update(procedure=Procedure.objects.get(pk=self.older.pk), actor="t", is_active=True)

    def test_an_activation_during_a_learning_pass_never_deadlocks(self):
        """The pass holds the first procedure it counted; the activation of the lineage starts
        and waits for it. The pass then counts the other version and commits, and the
        activation goes on after it."""
        activation = Elsewhere(self.activate_older)
        runs_apply, fired = learning._runs_apply, []

        def counted(procedure_id, *args, **kwargs):
            runs_apply(procedure_id, *args, **kwargs)
            if not fired:
                fired.append(procedure_id)
                activation.start()

        with mock.patch.object(learning, "_runs_apply", counted):
            result = procedures_learn(workspace=self.workspace)
        outcome = activation.finish()
        assert "error" not in outcome, outcome
        assert fired
        assert result.runs_counted == 3
        connection.ensure_connection()
        counts = dict(Procedure.objects.values_list("pk", "success_count"))
        assert counts == {self.older.pk: 2, self.newer.pk: 1}
        assert ProcedureRun.objects.count() == 3
        assert set(Procedure.objects.filter(is_active=True).values_list("pk", flat=True)) == {self.older.pk}

    def test_a_learning_pass_during_an_activation_never_deadlocks(self):
        """The activation holds the lineage; the pass waits for it, then counts every run."""
        from procedures.services import procedures as procedures_module

        pass_ = Elsewhere(lambda: procedures_learn(workspace=self.workspace))
        deactivate, fired = procedures_module._versions_deactivate, []

        def deactivated(**kwargs):
            if not fired:
                fired.append(True)
                pass_.start()
            return deactivate(**kwargs)

        with mock.patch.object(procedures_module, "_versions_deactivate", deactivated):
            self.activate_older()
        outcome = pass_.finish()
        assert "error" not in outcome, outcome
        assert fired
        assert outcome["value"].runs_counted == 3
        counts = dict(Procedure.objects.values_list("pk", "success_count"))
        assert counts == {self.older.pk: 2, self.newer.pk: 1}

    def test_a_pass_aborted_as_a_deadlock_victim_runs_again_whole(self):
        """The database aborts the pass for a concurrent writer after it counted one
        procedure: nothing of that run stays, and the pass runs again and counts every run
        once (the task that queued it has no retry of its own)."""
        runs_apply, calls = learning._runs_apply, []

        def victim_once(procedure_id, *args, **kwargs):
            runs_apply(procedure_id, *args, **kwargs)
            calls.append(procedure_id)
            if len(calls) == 1:
                raise OperationalError("deadlock detected") from psycopg.errors.DeadlockDetected()

        with mock.patch.object(learning, "_runs_apply", victim_once):
            result = procedures_learn(workspace=self.workspace)
        assert len(calls) == 3
        assert result.runs_counted == 3
        counts = dict(Procedure.objects.values_list("pk", "success_count"))
        assert counts == {self.older.pk: 2, self.newer.pk: 1}
        assert ProcedureRun.objects.count() == 3
