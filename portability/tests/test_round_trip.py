"""Export a seeded workspace, import it into an empty one, export again: equal modulo ids."""

from django.test import TestCase

from core.services import workspace_create
from core.tests.reliability.routes import seed_world
from facts.models import Fact, FactKey
from identities.models import ChannelIdentity
from portability.models import ImportIdMap
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes, normalized, records
from threads.models import Message, Thread


class RoundTripTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()
        cls.target = workspace_create(name="Empty")

    def test_a_whole_workspace_survives_export_and_import(self):
        """Every tier with history: the second export equals the first, modulo ids."""
        first = export_bytes(Scope(workspace=self.world.w1, history=True, vectors=True))
        report = import_bytes(self.target, first)
        assert report["created"]["message"] == 4
        second = export_bytes(Scope(workspace=self.target, history=True, vectors=True))
        assert normalized(first) == normalized(second)
        types = {r["type"] for r in records(first)[1:]}
        assert {"agent", "memory_user", "channel_identity", "thread", "message", "fact", "episode"} <= types
        assert {"episodic_entry", "procedure", "checkpoint", "checkpoint_write", "store_item"} <= types
        assert {"thread_plan", "run_snapshot", "iteration_log", "audit_event"} <= types

    def test_ids_are_remapped_consistently(self):
        """Parents, sources and threads point at the imported rows, never at the source's."""
        import_bytes(self.target, export_bytes(Scope(workspace=self.world.w1, history=True)))
        thread = Thread.objects.get(workspace=self.target, title="Trip")
        messages = list(Message.objects.filter(thread=thread).order_by("seq"))
        source = list(Message.objects.filter(thread=self.world.thread).order_by("seq"))
        position = {m.pk: i for i, m in enumerate(messages)}
        source_position = {m.pk: i for i, m in enumerate(source)}
        assert [position.get(m.parent_id) for m in messages] == [
            source_position.get(m.parent_id) for m in source
        ]
        assert messages[1].parent_id == messages[0].pk
        assert all(m.pk != self.world.m_user.pk for m in messages)
        session = Fact.objects.get(workspace=self.target, key="timezone")
        assert session.thread_id == thread.pk
        assert session.source_message_id == messages[0].pk
        assert session.source_episode.workspace_id == self.target.pk
        assert FactKey.objects.filter(workspace=self.target, key_normalized="timezone").exists()
        identity = ChannelIdentity.objects.get(workspace=self.target, external_id="1001")
        assert identity.memory_user.workspace_id == self.target.pk

    def test_a_second_import_changes_nothing(self):
        data = export_bytes(Scope(workspace=self.world.w1, history=True, vectors=True))
        import_bytes(self.target, data)
        before = normalized(export_bytes(Scope(workspace=self.target, history=True, vectors=True)))
        mapped = ImportIdMap.objects.filter(workspace=self.target).count()
        report = import_bytes(self.target, data)
        assert report["created"] == {}
        assert sum(report["already_imported"].values()) == report["records"]
        assert normalized(export_bytes(Scope(workspace=self.target, history=True, vectors=True))) == before
        assert ImportIdMap.objects.filter(workspace=self.target).count() == mapped

    def test_a_dry_run_creates_nothing_and_reports(self):
        data = export_bytes(Scope(workspace=self.world.w1))
        report = import_bytes(self.target, data, dry_run=True)
        assert report["dry_run"] is True
        assert report["created"]["thread"] == 2
        assert not Thread.objects.filter(workspace=self.target).exists()
        assert not ImportIdMap.objects.filter(workspace=self.target).exists()
