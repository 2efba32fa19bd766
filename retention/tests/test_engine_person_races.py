"""Retention's batch of facts or entries on one connection, and on another an erasure or a
merge of the person the rows belong to: neither waits for the other in a cycle (PostgreSQL
would abort one as a deadlock), and every row either goes or moves whole.

An erasure or a merge locks the person (FOR UPDATE) before their rows. The facts batch locked
its facts, then rebuilt the person's preferences (an UPDATE of the person); the entries batch
locked its entries, then deleted their vectors, which an erasure deletes before it waits for
the entries. Both now hold the people of their rows first (FOR KEY SHARE, SKIP LOCKED), so an
erasure or merge in progress keeps the batch off that person's rows, and one that starts
later waits for the batch."""

import dataclasses
from datetime import timedelta
from unittest import mock

from django.db import OperationalError, transaction
from django.test import TestCase, TransactionTestCase
from django.utils import timezone

from core.services import agent_register, workspace_create
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory
from facts.models import Fact
from facts.services import fact_remember
from identities import services as identities_module
from identities.models import MemoryUser
from identities.services import memory_user_erase, memory_user_merge
from provenance.tests.test_purge_races import Pause
from retention import services as retention_services
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_rules_effective
from retention.services import _apply_rule
from retention.targets import TARGETS
from retention.tasks import retention_run_task
from retention.tests.test_engine_append_race import Elsewhere, finished_cleanly

EXPIRED = timedelta(days=40)


class PersonRaceTestCase(TransactionTestCase):
    tier = ""

    def setUp(self):
        self.workspace = workspace_create(name="Retention and people")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)
        self.other = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        RetentionRule.objects.create(workspace=self.workspace, tier=self.tier, max_age_days=30)
        self.run = RetentionRun.objects.create(workspace=self.workspace)

    def retain(self) -> int:
        (rule,) = [r for r in retention_rules_effective(workspace=self.workspace) if r.tier == self.tier]
        return _apply_rule(rule=rule, now=timezone.now(), run=self.run)

    def erasure(self):
        return Elsewhere(lambda: memory_user_erase(memory_user=self.person, actor="t"))

    def merge(self):
        return Elsewhere(lambda: memory_user_merge(source=self.person, target=self.other, actor="t"))

    def during_batch(self, hook: str, work: Elsewhere) -> int:
        """Run one batch here; once it holds its rows (at the target's `hook`), start `work`
        and go on when it waits for a lock or has finished. Returns the rows the batch deleted."""
        target = TARGETS[self.tier]
        original, fired = getattr(target, hook), []

        def held(ids):
            if not fired:
                fired.append(True)
                work.start()
            if original is None:
                return ids if hook == "before_delete" else target.model.objects.filter(pk__in=ids).delete()
            return original(ids)

        with mock.patch.dict(TARGETS, {self.tier: dataclasses.replace(target, **{hook: held})}):
            deleted = self.retain()
        assert fired
        return deleted

    def batch_with(self, work: Elsewhere) -> int:
        """One batch here, `work` (an erasure or a merge) started once the batch holds its rows
        (during_batch); the rows the batch deleted, once `work` finished cleanly too."""
        deleted = self.during_batch("before_delete", work)
        finished_cleanly(work)
        return deleted

    def batch_while_fact_held(self, fact) -> int:
        """One run on another connection while this one holds `fact` as a fact write does (FOR
        NO KEY UPDATE); the rows the run deleted."""
        batch = Elsewhere(self.retain)
        with transaction.atomic():
            list(Fact.objects.select_for_update(no_key=True).filter(pk=fact.pk).values_list("pk"))
            batch.start()
            (outcome,) = finished_cleanly(batch)
        return outcome["value"]

    def batch_during(self, work: Elsewhere, step: str) -> Elsewhere:
        """`work` (an erasure or a merge) holds its people and is about to move or delete their
        rows (identities' `step`); the batch runs meanwhile."""
        pause = Pause(identities_module, step, work)
        with pause.patch:
            work.worker.start()
            assert pause.paused.wait(30)
            batch = Elsewhere(self.retain)
            batch.start()
            pause.go.set()
            finished_cleanly(work, batch)
        return batch

    def batch_during_erasure(self) -> Elsewhere:
        """The erasure holds the person and is about to delete their rows; the batch runs."""
        return self.batch_during(self.erasure(), "holdings_erase")

    def deleted_during_erasure(self) -> int:
        """The rows a batch run during an erasure (batch_during_erasure) deleted itself."""
        return self.batch_during_erasure().outcome["value"]


class FactsBatchTests(PersonRaceTestCase):
    tier = Tier.FACTS

    def setUp(self):
        super().setUp()
        for key, value in (("drink", "tea"), ("city", "Lisbon")):
            fact_remember(
                workspace=self.workspace,
                agent=self.agent,
                memory_user=self.person,
                scope=Fact.Scope.USER,
                fact_type=Fact.FactType.USER_PREFERENCE,
                key=key,
                value=value,
            )
        # "drink" expires; "city" stays.
        Fact.objects.filter(key="drink").update(updated_at=timezone.now() - EXPIRED)
        self.expired = Fact.objects.get(key="drink")
        assert MemoryUser.objects.get(pk=self.person.pk).preferences == {"drink": "tea", "city": "Lisbon"}

    def test_an_erasure_during_a_facts_batch_never_deadlocks(self):
        """The batch holds the expired preference and will rebuild the person's preferences;
        the erasure of the person starts meanwhile and waits for the batch."""
        erasure = self.erasure()
        deleted = self.during_batch("delete", erasure)
        finished_cleanly(erasure)
        assert deleted == 1
        assert not Fact.objects.exists()
        assert not MemoryUser.objects.filter(pk=self.person.pk).exists()

    def test_a_facts_batch_during_an_erasure_never_deadlocks(self):
        """The erasure holds the person; the batch leaves the person's facts to it."""
        assert self.deleted_during_erasure() == 0
        assert not Fact.objects.exists()

    def test_a_merge_during_a_facts_batch_never_deadlocks(self):
        """The batch holds the expired preference; the merge of its person starts meanwhile
        and waits for the batch, then moves what is left."""
        merge = self.merge()
        deleted = self.during_batch("delete", merge)
        finished_cleanly(merge)
        assert deleted == 1
        assert list(Fact.objects.values_list("key", "memory_user_id")) == [("city", self.other.pk)]
        assert MemoryUser.objects.get(pk=self.other.pk).preferences == {"city": "Lisbon"}

    def test_a_facts_batch_during_a_merge_never_deadlocks(self):
        """The merge holds both people; the batch leaves their facts to a later batch."""
        batch = self.batch_during(self.merge(), "holdings_merge")
        assert batch.outcome["value"] == 0
        assert set(Fact.objects.values_list("key", "memory_user_id")) == {
            ("drink", self.other.pk),
            ("city", self.other.pk),
        }
        # The next run deletes the expired fact on its new person (the move stamped it).
        Fact.objects.filter(key="drink").update(updated_at=timezone.now() - EXPIRED)
        assert self.retain() == 1
        assert MemoryUser.objects.get(pk=self.other.pk).preferences == {"city": "Lisbon"}


class HeldMeanwhileTests(TestCase):
    """A legal hold placed after the batch chose its rows, on the person or on a record merged
    into them, keeps the batch off the person's rows: the people's lock reads it again."""

    def setUp(self):
        self.workspace = workspace_create(name="Held meanwhile")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)
        self.fact = fact_remember(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.person,
            scope=Fact.Scope.USER,
            key="drink",
            value="tea",
        ).fact

    def kept(self) -> list:
        ids = [self.fact.pk]
        return list(Fact.objects.filter(pk__in=ids).filter(TARGETS[Tier.FACTS].owner_lock(ids)))

    def test_a_person_held_since_is_left_out(self):
        assert self.kept() == [self.fact]
        MemoryUser.objects.filter(pk=self.person.pk).update(legal_hold_at=timezone.now())
        assert self.kept() == []

    def test_a_hold_on_a_record_merged_into_the_person_leaves_them_out(self):
        MemoryUser.objects.create(
            workspace=self.workspace,
            canonical_id="email:old@example.com",
            merged_into=self.person,
            legal_hold_at=timezone.now(),
        )
        assert self.kept() == []


class EntriesBatchTests(PersonRaceTestCase):
    tier = Tier.EPISODIC_ENTRIES

    def setUp(self):
        super().setUp()
        # With a vector each: an erasure deletes the vectors of the person's entries before it
        # waits for the entries, and the batch deletes the vectors of its own.
        self.expired = entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Ada moved to Lisbon.",
            created_at=timezone.now() - EXPIRED,
        )
        self.kept = entry_factory(agent=self.agent, memory_user=self.person, content="Ada has a cat.")

    def test_an_erasure_during_an_entries_batch_never_deadlocks(self):
        deleted = self.batch_with(self.erasure())
        assert deleted == 1
        assert not EpisodicEntry.objects.exists() and not EntryEmbedding.objects.exists()

    def test_an_entries_batch_during_an_erasure_never_deadlocks(self):
        assert self.deleted_during_erasure() == 0
        assert not EpisodicEntry.objects.exists() and not EntryEmbedding.objects.exists()

    def test_a_merge_during_an_entries_batch_never_deadlocks(self):
        deleted = self.batch_with(self.merge())
        assert deleted == 1
        assert list(EpisodicEntry.objects.values_list("pk", "memory_user_id")) == [
            (self.kept.pk, self.other.pk)
        ]
        assert list(EntryEmbedding.objects.values_list("entry_id", "memory_user_id")) == [
            (self.kept.pk, self.other.pk)
        ]


class DeadlockVictimRetriedTests(TestCase):
    def test_a_run_aborted_as_a_deadlock_victim_is_run_again_by_its_task(self):
        """PostgreSQL aborts a batch as a deadlock victim: the run is marked failed and the task
        retries (DATABASE_UNAVAILABLE), and the retry's run deletes what the first left."""
        workspace = workspace_create(name="Victims")
        agent = agent_register(workspace=workspace, slug="support")
        person = memory_user_factory(workspace)
        RetentionRule.objects.create(workspace=workspace, tier=Tier.FACTS, max_age_days=30)
        fact_remember(
            workspace=workspace,
            agent=agent,
            memory_user=person,
            scope=Fact.Scope.USER,
            key="drink",
            value="tea",
        )
        Fact.objects.update(updated_at=timezone.now() - EXPIRED)
        delete_batch, calls = retention_services._delete_batch, []

        def victim_once(**kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise OperationalError("deadlock detected")
            return delete_batch(**kwargs)

        # Applied eagerly, the retry runs at once instead of after its countdown.
        with mock.patch.object(retention_services, "_delete_batch", victim_once):
            result = retention_run_task.apply(args=[str(workspace.pk)], throw=False)
        assert result.successful()
        assert len(calls) == 2
        assert not Fact.objects.exists()
        states = sorted(RetentionRun.objects.filter(workspace=workspace).values_list("state", flat=True))
        assert states == sorted([RetentionRun.State.FAILED, RetentionRun.State.DONE])
