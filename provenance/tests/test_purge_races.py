"""Purge by source (provenance.services.derived_purge) on one connection, and on another the
episodic entry vector job, retention's batch of entries or an erasure of the person: neither
waits for the other in a cycle (PostgreSQL would abort one as a deadlock), and every row
either goes or keeps its links whole.

The purge locks its entries (FOR UPDATE) before it deletes them. The vector job skips entries
held elsewhere; retention's batch skips the entries held elsewhere and those that hang from
them; an erasure locks the person first and the purge never waits for the person while it
holds entries."""

import dataclasses
import threading
from datetime import timedelta
from unittest import mock

from django.db.models.query import QuerySet
from django.test import TransactionTestCase
from django.utils import timezone

from core.access import Principal
from core.models import Membership
from core.services import agent_register, workspace_create
from core.testing_embeddings import RacingEmbeddingProvider
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entry_embed_batch
from episodic.tests.factories import entry_factory, memory_user_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.services import memory_user_erase
from provenance import services as purge_module
from provenance.services import derived_purge
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_rules_effective
from retention.services import _apply_rule
from retention.targets import TARGETS
from retention.tests.test_engine_append_race import Elsewhere, finished_cleanly
from threads.tests.factories import append, make_thread


class Pause:
    """Stops the first call of `owner.name` made by the worker thread of `work`, until `go`."""

    def __init__(self, owner, name, work=None):
        self.paused, self.go = threading.Event(), threading.Event()
        self.work = work
        original = getattr(owner, name)
        calls = []

        def paused(*args, **kwargs):
            if not calls and (self.work is None or threading.current_thread() is self.work.worker):
                calls.append(1)
                self.paused.set()
                self.go.wait(30)
            return original(*args, **kwargs)

        self.patch = mock.patch.object(owner, name, paused)


class PurgeRaceTestCase(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Purges")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        (self.message,) = append(self.thread, ("user", "I moved to Lisbon and I like tea."))

    def entry(self, content, *, derived=True, **kwargs):
        if derived:
            kwargs.update(source_thread=self.thread, source_message_ids=[str(self.message.pk)])
        return entry_factory(
            agent=self.agent, memory_user=self.person, content=content, embed=False, **kwargs
        )

    def purge(self):
        principal = Principal(workspace=self.workspace, role=Membership.Role.ADMIN)
        return Elsewhere(lambda: derived_purge(principal=principal, thread=self.thread))


class PurgeAndVectorJobTests(PurgeRaceTestCase):
    def test_a_purge_during_a_vector_job_never_deadlocks(self):
        """The job holds the entries while it writes their vectors; the purge waits for it
        and deletes the entries with their new vectors."""
        into = self.entry("Ada moved to Lisbon.")
        merged = self.entry(
            "Ada lives in Lisbon now.",
            derived=False,
            superseded_by=into,
            status=EpisodicEntry.Status.SUPERSEDED,
            review=EpisodicEntry.Review.MERGED,
        )
        job = Elsewhere(
            lambda: entry_embed_batch(entry_ids=[into.pk, merged.pk], provider=RacingEmbeddingProvider())
        )
        purge = self.purge()
        bulk_create, fired = QuerySet.bulk_create, []

        def vectors_written(queryset, objs, *args, **kwargs):
            if queryset.model is EntryEmbedding and not fired:
                fired.append(True)
                purge.start()
            return bulk_create(queryset, objs, *args, **kwargs)

        with mock.patch.object(QuerySet, "bulk_create", vectors_written):
            job.start()
            finished_cleanly(job, purge)
        assert fired
        assert list(EpisodicEntry.objects.values_list("pk", flat=True)) == [merged.pk]
        assert EpisodicEntry.objects.get(pk=merged.pk).superseded_by_id is None
        assert not EntryEmbedding.objects.exclude(entry=merged).exists()

    def test_a_vector_job_during_a_purge_skips_the_purged_entries(self):
        """The purge holds its entries; the job skips them instead of waiting."""
        gone = self.entry("Ada moved to Lisbon.")
        kept = self.entry("Ada has a cat.", derived=False)
        purge = self.purge()
        pause = Pause(purge_module, "_delete", purge)
        with pause.patch:
            purge.worker.start()
            assert pause.paused.wait(30)
            job = Elsewhere(
                lambda: entry_embed_batch(entry_ids=[gone.pk, kept.pk], provider=RacingEmbeddingProvider())
            )
            job.start()
            pause.go.set()
            _, (embedded) = finished_cleanly(purge, job)
        assert embedded["value"] == 1
        assert list(EntryEmbedding.objects.values_list("entry_id", flat=True)) == [kept.pk]


class PurgeAndRetentionTests(PurgeRaceTestCase):
    def setUp(self):
        super().setUp()
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.EPISODIC_ENTRIES, max_age_days=30)
        self.run = RetentionRun.objects.create(workspace=self.workspace)

    def retention(self):
        (rule,) = [
            r for r in retention_rules_effective(workspace=self.workspace) if r.tier == Tier.EPISODIC_ENTRIES
        ]
        return Elsewhere(lambda: _apply_rule(rule=rule, now=timezone.now(), run=self.run))

    def pair(self):
        """(`expired`, `merged`): a 40-day-old entry, and a recent one merged into it in
        review; both derived from the thread, the merged one first in the purge's key order
        and in its scan of the table."""
        while True:
            expired = self.entry("Ada moved to Lisbon.", created_at=timezone.now() - timedelta(days=40))
            merged = self.entry(
                "Ada lives in Lisbon now.",
                superseded_by=expired,
                status=EpisodicEntry.Status.SUPERSEDED,
                review=EpisodicEntry.Review.MERGED,
            )
            if merged.pk < expired.pk:
                break
            EpisodicEntry.objects.all().delete()
        # A new row version of `expired`, after `merged` in the table: a scan of the thread's
        # entries meets (and locks) `merged` first.
        EpisodicEntry.objects.filter(pk=expired.pk).update(content="Ada moved to Lisbon in May.")
        return expired, merged

    def test_a_purge_during_a_retention_batch_never_deadlocks(self):
        """Retention holds the expired entry and is about to delete it; the purge locks the
        entry merged into it, then waits for the expired one. Retention's delete would unlink
        the merged entry (its `superseded_by`), held by the purge: a cycle, unless the batch
        leaves an entry whose dependants it cannot lock for a later batch."""
        expired, merged = self.pair()
        retention = self.retention()
        target = TARGETS[Tier.EPISODIC_ENTRIES]
        locked = threading.Event()
        go = threading.Event()

        def held(ids):
            # The batch holds its entries (`expired`) here, before anything else it does.
            locked.set()
            go.wait(30)
            return target.before_delete(ids) if target.before_delete else ids

        paused = dataclasses.replace(target, before_delete=held)
        with mock.patch.dict(TARGETS, {Tier.EPISODIC_ENTRIES: paused}):
            retention.worker.start()
            assert locked.wait(30)
            purge = self.purge()
            purge.start()
            go.set()
            _, deleted = finished_cleanly(retention, purge)
        assert not EpisodicEntry.objects.filter(pk__in=[expired.pk, merged.pk]).exists()
        # The batch left `expired` to the purge: its dependant was held by it.
        assert deleted["value"]["entries"] == 2

    def test_a_retention_batch_during_a_purge_leaves_the_purged_entries_to_it(self):
        expired, merged = self.pair()
        purge = self.purge()
        pause = Pause(purge_module, "_delete", purge)
        with pause.patch:
            purge.worker.start()
            assert pause.paused.wait(30)
            retention = self.retention()
            retention.start()
            pause.go.set()
            finished_cleanly(purge, retention)
        assert not EpisodicEntry.objects.filter(pk__in=[expired.pk, merged.pk]).exists()


class PurgeAndErasureTests(PurgeRaceTestCase):
    def setUp(self):
        super().setUp()
        self.entry("Ada moved to Lisbon.")
        fact_remember(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.person,
            scope=Fact.Scope.USER,
            fact_type=Fact.FactType.USER_PREFERENCE,
            key="drink",
            value="tea",
            source_message=self.message,
        )

    def erasure(self):
        return Elsewhere(lambda: memory_user_erase(memory_user=self.person, actor="t"))

    def test_an_erasure_during_a_purge_never_deadlocks(self):
        """The purge holds the person's entry and fact (then rebuilds the person's
        preferences); the erasure of the person starts meanwhile."""
        purge = self.purge()
        pause = Pause(purge_module, "_delete", purge)
        with pause.patch:
            purge.worker.start()
            assert pause.paused.wait(30)
            erasure = self.erasure()
            erasure.start()
            pause.go.set()
            finished_cleanly(purge, erasure)
        assert not EpisodicEntry.objects.exists() and not Fact.objects.exists()

    def test_a_purge_during_an_erasure_never_deadlocks(self):
        from identities import services as identities_module

        erasure = self.erasure()
        pause = Pause(identities_module, "holdings_erase", erasure)
        with pause.patch:
            erasure.worker.start()
            assert pause.paused.wait(30)
            purge = self.purge()
            purge.start()
            pause.go.set()
            finished_cleanly(erasure, purge)
        assert not EpisodicEntry.objects.exists() and not Fact.objects.exists()
