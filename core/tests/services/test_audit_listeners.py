from unittest import mock

from django.test import TestCase

from core import events
from core.services import audit_record
from core.testing import MemoryTestCase


class AuditListenerTests(MemoryTestCase):
    def setUp(self):
        super().setUp()
        self.calls = []
        registered = dict(events._listeners)
        self.addCleanup(lambda: (events._listeners.clear(), events._listeners.update(registered)))
        events._listeners.clear()
        events.audit_listener_register("all", lambda ws: self.calls.append(("all", ws)))
        events.audit_listener_register(
            "episodes-only", lambda ws: self.calls.append(("episodes-only", ws)), entity_types={"episode"}
        )

    def write(self, entity_type):
        audit_record(
            workspace=self.workspace, actor="test", action="create", entity_type=entity_type, entity_id="1"
        )

    def record(self, entity_type):
        with self.captureOnCommitCallbacks(execute=True):
            self.write(entity_type)

    def test_a_listener_with_entity_types_hears_only_those(self):
        self.record("episodic_entry")
        assert self.calls == [("all", self.workspace.pk)]

        self.calls.clear()
        self.record("episode")
        assert self.calls == [("all", self.workspace.pk), ("episodes-only", self.workspace.pk)]

    def test_nothing_is_told_before_commit(self):
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            self.write("episode")
        assert self.calls == []
        assert len(callbacks) == 1

    def test_a_failing_listener_never_fails_the_write_nor_the_others(self):
        events.audit_listener_register("broken", mock.Mock(side_effect=RuntimeError("down")))
        self.record("episode")
        assert ("episodes-only", self.workspace.pk) in self.calls


class ProceduresListenerRegistrationTests(TestCase):
    def test_procedures_learning_listens_to_episode_events_only(self):
        _, entity_types = events._listeners["procedures-learning"]
        assert entity_types == frozenset({"episode"})
        _, webhook_types = events._listeners["webhooks"]
        assert webhook_types is None
