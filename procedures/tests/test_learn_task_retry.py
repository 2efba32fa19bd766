"""procedures_learn_task retries a pass the database failed for a transient reason (an outage,
or a deadlock or serialization failure that outlived the service's own LEARN_ATTEMPTS), does not
retry a permanent failure, and a failed pass leaves the workspace due for learning again."""

from datetime import timedelta
from unittest import mock

import psycopg
import pytest
from celery.exceptions import Retry
from django.core.cache import cache
from django.db import IntegrityError, InterfaceError, OperationalError
from django.utils import timezone

from core.testing import MemoryTestCase
from episodes.services.records import episode_create
from procedures.models import Procedure, ProcedureLearningState
from procedures.services import learning, procedures_learn_sweep
from procedures.services.learning import NUDGE_KEY, procedures_learn_listener
from procedures.tasks import procedures_learn_task

TRANSIENT = {
    "deadlock": lambda: OperationalError("deadlock detected"),
    "serialization": lambda: OperationalError("could not serialize access"),
    "outage": lambda: OperationalError("server closed the connection unexpectedly"),
    "connection closed": lambda: InterfaceError("connection already closed"),
}
CAUSES = {
    "deadlock": psycopg.errors.DeadlockDetected,
    "serialization": psycopg.errors.SerializationFailure,
}


def _failing_propose(error_factory, cause=None):
    """`_propose` that stores its proposal, then fails: the failure comes after a write of the pass."""
    real = learning._propose

    def propose(**kwargs):
        real(**kwargs)
        error = error_factory()
        if cause is not None:
            raise error from cause()
        raise error

    return propose


class LearnTaskRetryTests(MemoryTestCase):
    def setUp(self):
        cache.clear()
        start = timezone.now() - timedelta(hours=1)
        for n in range(3):
            episode_create(
                workspace=self.workspace,
                agent=self.agent,
                trigger_type="chat",
                input={"goal": f"Refund order {n}"},
                outcome="success",
                started_at=start + timedelta(minutes=n),
                ended_at=start + timedelta(minutes=n, seconds=30),
            )
        self.nudge = NUDGE_KEY.format(workspace_id=self.workspace.pk)

    def assert_nothing_learned(self):
        assert not Procedure.objects.filter(workspace=self.workspace).exists()
        state = ProcedureLearningState.objects.filter(workspace=self.workspace).first()
        assert state is None or state.learned_at is None

    def test_a_transient_database_failure_is_retried(self):
        """An outage, or a deadlock or serialization failure past the pass's own attempts, is a
        Celery retry; the failed pass stored nothing and the retried one learns."""
        for name, factory in TRANSIENT.items():
            with self.subTest(name):
                propose = _failing_propose(factory, CAUSES.get(name))
                with mock.patch.object(learning, "_propose", propose), pytest.raises(Retry):
                    procedures_learn_task.delay(str(self.workspace.pk))
                self.assert_nothing_learned()
        result = procedures_learn_task.delay(str(self.workspace.pk)).get()
        assert result["proposed"] == 1

    def test_a_permanent_failure_is_not_retried(self):
        """A bug or a constraint violation fails the task once; retrying would fail the same way."""
        for error in (ValueError("bad episode"), IntegrityError("violates check constraint")):
            with self.subTest(type(error).__name__):
                propose = _failing_propose(lambda error=error: error)
                with mock.patch.object(learning, "_propose", propose), pytest.raises(type(error)):
                    procedures_learn_task.delay(str(self.workspace.pk))
                self.assert_nothing_learned()

    def test_the_retry_policy_is_the_house_one(self):
        """The same backoff as the compaction and embedding tasks, for database failures only."""
        assert set(procedures_learn_task.autoretry_for) == {OperationalError, InterfaceError}
        assert procedures_learn_task.retry_backoff == 10
        assert procedures_learn_task.retry_backoff_max == 600
        assert procedures_learn_task.max_retries == 6

    def test_a_failed_pass_leaves_the_workspace_due(self):
        """The nudge the task clears first is not lost: the next commit queues a pass, and the
        sweep learns there too."""
        cache.set(self.nudge, 1, 600)  # the listener queued this pass
        propose = _failing_propose(TRANSIENT["outage"])
        with mock.patch.object(learning, "_propose", propose), pytest.raises(Retry):
            procedures_learn_task.delay(str(self.workspace.pk))
        self.assert_nothing_learned()
        assert learning._episodes_changed_since(self.workspace.pk, from_state=True)
        # The sweep still sees the workspace as changed since its (unmoved) cursor.
        sweep = procedures_learn_sweep(limit=10, now=timezone.now() + timedelta(minutes=1))
        assert sweep["learned"] >= 1 and sweep["proposed"] == 1
        Procedure.objects.filter(workspace=self.workspace).delete()
        ProcedureLearningState.objects.filter(workspace=self.workspace).delete()
        # And a commit's nudge queues (here: runs, eagerly) a new pass at once.
        cache.delete(self.nudge)
        with mock.patch.object(learning, "_propose", propose), pytest.raises(Retry):
            procedures_learn_task.delay(str(self.workspace.pk))
        assert cache.get(self.nudge) is None
        procedures_learn_listener(self.workspace.pk)
        assert Procedure.objects.filter(workspace=self.workspace, origin="self_learned").count() == 1
