"""docs/export.md: an import reads a file "into another workspace (or the same one after a
loss)". Into its own workspace, a row of the file that survived the loss is that row: the
import brings back what was lost and duplicates nothing."""

import json

from django.test import TestCase

from core.tests.reliability.routes import seed_world, snapshot
from episodes.models import Episode
from episodic.models import EpisodicEntry
from facts.models import Fact
from portability.registry import Scope
from portability.services import ImportFailed
from portability.tests.helpers import export_bytes, import_bytes, normalized, records
from procedures.models import Procedure
from store.models import StoreItem
from threads.models import Message, Thread


def counts(workspace) -> dict:
    return {
        "thread": Thread.objects.filter(workspace=workspace).count(),
        "message": Message.objects.filter(workspace=workspace).count(),
        "episode": Episode.objects.filter(workspace=workspace).count(),
        "fact": Fact.objects.filter(workspace=workspace).count(),
        "open_fact": Fact.objects.filter(workspace=workspace, valid_to__isnull=True).count(),
        "entry": EpisodicEntry.objects.filter(workspace=workspace).count(),
        "procedure": Procedure.objects.filter(workspace=workspace).count(),
        "store_item": StoreItem.objects.filter(workspace=workspace).count(),
    }


class RestoreTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()

    def test_a_restore_into_the_same_workspace_brings_back_what_was_lost_and_nothing_twice(self):
        w = self.world
        scope = Scope(workspace=w.w1, history=True)
        data = export_bytes(scope)
        before = counts(w.w1)
        lost_thread = w.a2_thread.pk
        Thread.objects.filter(pk=lost_thread).delete()
        Fact.objects.filter(workspace=w.w1, key="city").delete()
        report = import_bytes(w.w1, data)
        assert counts(w.w1) == before, report
        assert Thread.objects.filter(workspace=w.w1, title="Lead").count() == 1
        assert Fact.objects.get(workspace=w.w1, key="city").valid_to is None
        assert report["facts_versioned"] == 0
        # Apart from the lost rows' new ids, the workspace is what was exported.
        assert normalized(export_bytes(scope)) == normalized(data)

    def test_a_restore_with_nothing_lost_creates_nothing(self):
        w = self.world
        scope = Scope(workspace=w.w1, history=True)
        data = export_bytes(scope)
        report = import_bytes(w.w1, data)
        assert report["created"] == {}, report
        assert normalized(export_bytes(scope)) == normalized(data)

    def test_a_file_claiming_to_be_this_workspace_cannot_take_another_workspaces_rows(self):
        """Ids come back only into their own workspace: a row of another workspace named by a
        crafted file is neither reused nor overwritten; the import is refused whole."""
        w = self.world
        rows = records(export_bytes(Scope(workspace=w.w1)))
        rows[0]["source"] = str(w.w2.pk)
        lead = next(r for r in rows if r.get("type") == "thread" and r["title"] == "Lead")
        lead["id"] = str(w.thread.pk)  # the id of a1's "Trip" thread, a row of w1
        lead_messages = [r for r in rows if r.get("type") == "message" and r["thread"] == str(w.a2_thread.pk)]
        for message in lead_messages:
            message["thread"] = lead["id"]
        data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
        before = snapshot(w.w1)
        with self.assertRaises(ImportFailed) as caught:
            import_bytes(w.w2, data)
        assert caught.exception.code == "row_refused"
        assert snapshot(w.w1) == before
        assert not Thread.objects.filter(workspace=w.w2).exists()
