"""Entry deletions against erasure and batch deletes. A deletion lets the collector delete its
vectors and unlink the entries superseded by it before it deletes the entry, as every other
deletion of entries does (erasure through core.holdings, entries_delete). A version that
locked the entry first, for the vector job's sake, deadlocked with both; the vector job skips
locked entries instead (test_vector_deletion_races)."""

import threading
from unittest import mock

from django.test import TransactionTestCase

from core.services import agent_register, workspace_create
from episodic.models import EpisodicEntry
from episodic.services import entries as entries_module
from episodic.services import entries_delete, entry_delete
from episodic.tests.factories import entry_factory, memory_user_factory
from identities.services import memory_user_erase
from retention.tests.test_engine_append_race import Elsewhere


class PausedDelete:
    """entry_delete on its own connection, stopped at its audit event (after its lock)."""

    def __init__(self, entry):
        self.paused, self.go = threading.Event(), threading.Event()
        original = entries_module.audit_record
        calls = []

        def audit(**kwargs):
            if not calls:
                calls.append(1)
                self.paused.set()
                self.go.wait(30)
            return original(**kwargs)

        self.patch = mock.patch.object(entries_module, "audit_record", audit)
        self.work = Elsewhere(lambda: entry_delete(entry=entry, actor="t"))


class EntryDeleteLockOrderTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Lock order")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)

    def test_an_entry_delete_and_an_erasure_of_its_person_do_not_deadlock(self):
        entry = entry_factory(agent=self.agent, memory_user=self.person, content="Ada moved.")
        deletion = PausedDelete(entry)
        with deletion.patch:
            deletion.work.worker.start()
            assert deletion.paused.wait(30)
            erasure = Elsewhere(lambda: memory_user_erase(memory_user=self.person, actor="t"))
            erasure.start()  # returns once it waits for a lock, or has finished
            deletion.go.set()
            deleted, erased = deletion.work.finish(), erasure.finish()
        assert "error" not in deleted, deleted
        assert "error" not in erased, erased
        assert not EpisodicEntry.objects.exists()

    def test_an_entry_delete_and_a_batch_delete_of_it_and_its_superseded_entry_do_not_deadlock(self):
        while True:
            kept = entry_factory(agent=self.agent, memory_user=self.person, content="Ada moved to Lisbon.")
            old = entry_factory(
                agent=self.agent,
                memory_user=self.person,
                content="Ada lives in Porto.",
                superseded_by=kept,
                status=EpisodicEntry.Status.SUPERSEDED,
            )
            if old.pk < kept.pk:  # the batch's key order takes `old` first
                break
            EpisodicEntry.objects.all().delete()
        deletion = PausedDelete(kept)
        with deletion.patch:
            deletion.work.worker.start()
            assert deletion.paused.wait(30)
            batch = Elsewhere(
                lambda: entries_delete(
                    queryset=EpisodicEntry.objects.filter(pk__in=[kept.pk, old.pk]),
                    workspace=self.workspace,
                    actor="t",
                )
            )
            batch.start()
            deletion.go.set()
            deleted, batched = deletion.work.finish(), batch.finish()
        assert "error" not in deleted, deleted
        assert "error" not in batched, batched
        assert not EpisodicEntry.objects.exists()
