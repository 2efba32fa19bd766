"""Retention's batches of threads, messages, checkpoints, run snapshots and episodes against an
erasure or a merge of the person their rows belong to, and against a fact write citing the
rows they delete.

Every batch first holds the people its rows belong to (FOR KEY SHARE SKIP LOCKED, as the facts
and entries batches do): the people are read again there, so a row a merge moved meanwhile to
a person under a legal hold stays, and an erasure or merge in progress keeps the batch off the
person's rows instead of closing a cycle with it (an erasure deletes a checkpoint's writes, or
clears the facts citing an episode, before it waits for the row the batch holds). The facts
citing a message or an episode the batch deletes are locked in key order, SKIP LOCKED, before
the delete clears their reference: a row whose citing fact is held elsewhere stays for a later
batch."""

from django.db import OperationalError, transaction
from django.test import TransactionTestCase
from django.utils import timezone

from checkpoints.models import Checkpoint, CheckpointWrite
from checkpoints.services import checkpoint_writes_put
from checkpoints.tests.factories import make_checkpoint
from core.errors import NotFoundError
from core.services import agent_register, workspace_create
from episodes.models import Episode
from episodic.tests.factories import memory_user_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import memory_user_merge
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_candidates, retention_rules_effective
from retention.services import _delete_batch
from retention.tests.test_engine_append_race import Elsewhere
from retention.tests.test_engine_person_races import EXPIRED, PersonRaceTestCase
from threads.models import Message, RunSnapshot, SummarizedMessage, Thread
from threads.services.compaction import _summary_held_mark
from threads.tests.factories import append, make_thread


def _summarized_thread(*, workspace, agent, person, turns: int = 6) -> tuple[Thread, list, set]:
    """A thread of `person` whose summary holds its first turns alone, every turn expired;
    returns the thread, its messages and the ids the summary holds."""
    thread = make_thread(workspace=workspace, agent=agent, memory_user=person)
    messages = append(thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(turns)])
    end = messages[-2]
    Thread.objects.filter(pk=thread.pk).update(
        summary="- earlier turns", summary_upto_id=end.pk, summary_upto_depth=end.depth
    )
    with transaction.atomic():
        _summary_held_mark(thread_id=thread.pk, scope="", upto_id=end.pk, extends=False)
    held = set(SummarizedMessage.objects.filter(thread=thread).values_list("message_id", flat=True))
    assert held
    Message.objects.filter(thread=thread).update(created_at=timezone.now() - EXPIRED)
    return thread, messages, held


class MovedToAHeldPersonTests(TransactionTestCase):
    """A merge that commits after a batch chose its rows moves them to a person under a legal
    hold: the batch reads their person again under its lock and leaves them."""

    def setUp(self):
        self.workspace = workspace_create(name="Moved to a held person")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)
        self.held = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        MemoryUser.objects.filter(pk=self.held.pk).update(
            legal_hold_at=timezone.now(), legal_hold_reason="Litigation"
        )
        self.held.refresh_from_db()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.run = RetentionRun.objects.create(workspace=self.workspace)

    def chosen_then_merged(self, tier: str) -> int:
        """The batch's rows are chosen, the merge into the held person commits, then the batch
        runs on the rows it chose; returns how many it deleted."""
        RetentionRule.objects.create(workspace=self.workspace, tier=tier, max_age_days=30)
        (rule,) = [r for r in retention_rules_effective(workspace=self.workspace) if r.tier == tier]
        ids = list(retention_candidates(rule=rule, now=timezone.now(), limit_kind="age"))
        assert ids
        memory_user_merge(source=self.person, target=self.held, actor="t")
        return _delete_batch(rule=rule, ids=ids, run=self.run)

    def test_threads(self):
        Thread.objects.filter(pk=self.thread.pk).update(last_activity_at=timezone.now() - EXPIRED)
        assert self.chosen_then_merged(Tier.THREADS) == 0
        assert Thread.objects.get(pk=self.thread.pk).memory_user_id == self.held.pk

    def test_messages(self):
        thread, messages, _ = _summarized_thread(
            workspace=self.workspace, agent=self.agent, person=self.person
        )
        assert self.chosen_then_merged(Tier.MESSAGES) == 0
        assert Message.objects.filter(thread=thread).count() == len(messages)

    def test_checkpoints(self):
        make_checkpoint(self.thread, "1")
        Checkpoint.objects.update(created_at=timezone.now() - EXPIRED)
        assert self.chosen_then_merged(Tier.CHECKPOINTS) == 0
        assert Checkpoint.objects.filter(thread=self.thread).count() == 1

    def test_run_snapshots(self):
        RunSnapshot.objects.create(
            workspace=self.workspace, thread=self.thread, run_id="r1", updated_at=timezone.now() - EXPIRED
        )
        assert self.chosen_then_merged(Tier.RUN_SNAPSHOTS) == 0
        assert RunSnapshot.objects.filter(thread=self.thread).count() == 1

    def test_episodes(self):
        episode = Episode.objects.create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        Episode.objects.filter(pk=episode.pk).update(created_at=timezone.now() - EXPIRED)
        assert self.chosen_then_merged(Tier.EPISODES) == 0
        assert Episode.objects.get(pk=episode.pk).memory_user_id == self.held.pk


class CheckpointsBatchTests(PersonRaceTestCase):
    tier = Tier.CHECKPOINTS

    def setUp(self):
        super().setUp()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.expired = make_checkpoint(self.thread, "1")
        checkpoint_writes_put(
            checkpoint=self.expired,
            task_id="t1",
            writes=[{"idx": 0, "channel": "messages", "type": "json", "data": b"1"}],
        )
        Checkpoint.objects.filter(pk=self.expired.pk).update(created_at=timezone.now() - EXPIRED)
        make_checkpoint(self.thread, "2", parent="1")
        assert CheckpointWrite.objects.filter(checkpoint=self.expired).exists()

    def test_an_erasure_during_a_checkpoints_batch_never_deadlocks(self):
        """The batch holds the expired checkpoint; the erasure deletes the thread's checkpoint
        writes, then waits for that checkpoint, while the batch would delete the same writes."""
        deleted = self.batch_with(self.erasure())
        assert deleted == 1
        assert not Checkpoint.objects.exists() and not CheckpointWrite.objects.exists()

    def test_a_checkpoints_batch_during_an_erasure_never_deadlocks(self):
        assert self.deleted_during_erasure() == 0
        assert not Checkpoint.objects.exists() and not CheckpointWrite.objects.exists()


class EpisodesBatchTests(PersonRaceTestCase):
    tier = Tier.EPISODES

    def setUp(self):
        super().setUp()
        self.expired = self.episode()
        Episode.objects.filter(pk=self.expired.pk).update(created_at=timezone.now() - EXPIRED)
        self.kept = self.episode()
        # Learned from the expired episode: deleting the episode clears the fact's reference.
        self.learned = fact_remember(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.person,
            scope=Fact.Scope.USER,
            key="drink",
            value="tea",
            source_episode=self.expired,
        ).fact

    def episode(self) -> Episode:
        return Episode.objects.create(workspace=self.workspace, agent=self.agent, memory_user=self.person)

    def test_an_erasure_during_an_episodes_batch_never_deadlocks(self):
        """The batch holds the expired episode; the erasure clears the facts citing the
        person's episodes, then waits for that episode, while the batch would clear the same."""
        deleted = self.batch_with(self.erasure())
        assert deleted == 1
        assert not Episode.objects.exists() and not Fact.objects.exists()

    def test_a_merge_during_an_episodes_batch_never_deadlocks(self):
        """The merge moves the facts first, then waits for the episode the batch holds."""
        deleted = self.batch_with(self.merge())
        assert deleted == 1
        assert list(Episode.objects.values_list("pk", "memory_user_id")) == [(self.kept.pk, self.other.pk)]
        assert Fact.objects.get(pk=self.learned.pk).source_episode_id is None

    def test_an_episodes_batch_during_an_erasure_never_deadlocks(self):
        assert self.deleted_during_erasure() == 0
        assert not Episode.objects.exists()

    def test_an_episode_whose_citing_fact_is_held_elsewhere_waits_for_a_later_batch(self):
        deleted = self.batch_while_fact_held(self.learned)
        assert deleted == 0
        assert self.retain() == 1
        assert Fact.objects.get(pk=self.learned.pk).source_episode_id is None


class MessagesBatchTests(PersonRaceTestCase):
    tier = Tier.MESSAGES

    def setUp(self):
        super().setUp()
        self.thread, self.messages, self.held = _summarized_thread(
            workspace=self.workspace, agent=self.agent, person=self.person
        )
        first, second = sorted(self.held)[:2]
        # A preference remembered from a summarized turn; a later turn (summarized too) changes it.
        self.cited = fact_remember(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.person,
            scope=Fact.Scope.USER,
            key="drink",
            value="tea",
            source_message=Message.objects.get(pk=first),
        ).fact
        self.later = Message.objects.get(pk=second)

    def test_a_fact_write_citing_a_message_during_a_messages_batch_never_deadlocks(self):
        """The batch holds the summarized messages; the write closes the fact citing one of
        them and commits a new version citing another (its reference is checked at commit),
        while the batch would clear the closed version's reference."""
        write = Elsewhere(
            lambda: fact_remember(
                workspace=self.workspace,
                agent=self.agent,
                memory_user=self.person,
                scope=Fact.Scope.USER,
                key="drink",
                value="coffee",
                source_message=Message.objects.get(pk=self.later.pk),
            )
        )
        deleted = self.during_batch("before_delete", write)
        outcome = write.finish()
        # The batch left the message whose citing fact the write held (its later batches of the
        # run may still have found it held) and takes it once the write is done. The write's
        # own outcome (its new version cites a message the batch deleted) is the facts tier's;
        # here it only must not be a deadlock.
        assert not isinstance(outcome.get("error"), OperationalError), outcome
        deleted += self.retain()
        assert deleted == len(self.held)
        assert Fact.objects.filter(pk=self.cited.pk, value="tea").exists()

    def test_a_message_whose_citing_fact_is_held_elsewhere_waits_for_a_later_batch(self):
        deleted = self.batch_while_fact_held(self.cited)
        cited = self.cited.source_message_id
        assert deleted == len(self.held) - 1
        assert Message.objects.filter(pk=cited).exists()
        assert self.retain() == 1
        assert Fact.objects.get(pk=self.cited.pk).source_message_id is None

    def test_a_messages_batch_during_an_erasure_never_deadlocks(self):
        assert self.deleted_during_erasure() == 0
        assert not Message.objects.exists()

    def test_a_merge_during_a_messages_batch_never_deadlocks(self):
        deleted = self.batch_with(self.merge())
        assert deleted == len(self.held)
        assert Thread.objects.get(pk=self.thread.pk).memory_user_id == self.other.pk


class ThreadsBatchTests(PersonRaceTestCase):
    tier = Tier.THREADS

    def setUp(self):
        super().setUp()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.session = self.remember("tea")
        Thread.objects.filter(pk=self.thread.pk).update(last_activity_at=timezone.now() - EXPIRED)

    def remember(self, value):
        return fact_remember(
            workspace=self.workspace,
            agent=self.agent,
            thread=self.thread,
            scope=Fact.Scope.SESSION,
            key="drink",
            value=value,
        ).fact

    def test_a_session_fact_write_during_a_threads_batch_never_deadlocks(self):
        """The batch holds the idle thread; the write, which would close the thread's fact and
        store a new version on that thread, waits for the thread before it takes the fact
        (facts' _sources_held). The batch deletes the thread with its facts; the write is then
        a 404 for the thread, not a deadlock, and stores nothing."""
        write = Elsewhere(lambda: self.remember("coffee"))
        deleted = self.during_batch("before_delete", write)
        outcome = write.finish()
        assert isinstance(outcome.get("error"), NotFoundError), outcome
        assert "thread" in outcome["error"].fields
        assert deleted == 1
        assert not Thread.objects.exists() and not Fact.objects.exists()

    def test_a_merge_during_a_threads_batch_never_deadlocks(self):
        deleted = self.batch_with(self.merge())
        assert deleted == 1
        assert not Thread.objects.exists() and not Fact.objects.exists()
