"""Issue 14, "One retention policy for every tier": rules per workspace with per-agent
overrides, by age or the newest N, legal holds, one engine, audited counts, a preview."""

from datetime import timedelta

from django.utils import timezone

from checkpoints.models import Checkpoint
from checkpoints.tests.factories import make_checkpoint
from core.models import AuditEvent
from core.services import agent_update
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.tests.factories import FactFactory
from identities.services import memory_user_hold_place
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_preview
from retention.services import RETENTION_ACTOR, retention_run
from threads.models import Message, Thread
from threads.selectors import message_history_window
from threads.services import thread_compact
from threads.tests.factories import append, make_thread

OLD = timezone.now() - timedelta(days=40)


def rule(workspace, tier, agent=None, **limits):
    return RetentionRule.objects.create(workspace=workspace, agent=agent, tier=tier, **limits)


class EngineTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, canonical_id="t:bo")

    def entry(self, agent, person, content, *, old):
        entry = entry_factory(agent=agent, memory_user=person, content=content, embed=False)
        if old:
            EpisodicEntry.objects.filter(pk=entry.pk).update(created_at=OLD)
        return entry

    def test_entries_by_age_with_an_agent_override_and_a_legal_hold(self):
        rule(self.workspace, Tier.EPISODIC_ENTRIES, max_age_days=30)
        rule(self.workspace, Tier.EPISODIC_ENTRIES, agent=self.other_agent, max_age_days=365)
        gone = self.entry(self.agent, self.ada, "Ada moved to Lisbon.", old=True)
        fresh = self.entry(self.agent, self.ada, "Ada likes tea.", old=False)
        overridden = self.entry(self.other_agent, self.ada, "Ada asked about Porto.", old=True)
        held = self.entry(self.agent, self.bo, "Bo signed the contract.", old=True)
        memory_user_hold_place(memory_user=self.bo, reason="Case 7", actor="test")
        elsewhere = entry_factory(
            agent=self.outsider_agent,
            memory_user=MemoryUserFactory(workspace=self.other_workspace),
            content="Elsewhere.",
            embed=False,
        )
        EpisodicEntry.objects.filter(pk=elsewhere.pk).update(created_at=OLD)

        assert retention_preview(workspace=self.workspace)["deletes"]["episodic_entries"] == 1
        run = retention_run(workspace=self.workspace, trigger="test")

        assert run.state == RetentionRun.State.DONE and run.deleted == {"episodic_entries": 1}
        left = set(EpisodicEntry.objects.values_list("pk", flat=True))
        assert gone.pk not in left and {fresh.pk, overridden.pk, held.pk, elsewhere.pk} <= left
        # Each deleted entry is audited, and the batch with its count.
        assert AuditEvent.objects.filter(
            actor=RETENTION_ACTOR, entity_type="episodic_entry", entity_id=str(gone.pk), action="delete"
        ).exists()
        batch = AuditEvent.objects.get(actor=RETENTION_ACTOR, entity_type="retention_run")
        assert batch.changes["tier"] == "episodic_entries" and batch.changes["deleted"] == 1
        assert retention_preview(workspace=self.workspace)["deletes"]["episodic_entries"] == 0

    def test_keep_the_newest_n_per_person(self):
        rule(self.workspace, Tier.EPISODES, keep_latest=2)
        now = timezone.now()
        for person in (self.ada, self.bo):
            for days in range(4):
                episode = EpisodeFactory(agent=self.agent, memory_user=person)
                Episode.objects.filter(pk=episode.pk).update(created_at=now - timedelta(days=days))
        assert retention_preview(workspace=self.workspace)["deletes"]["episodes"] == 4
        retention_run(workspace=self.workspace)
        for person in (self.ada, self.bo):
            kept = Episode.objects.filter(memory_user=person).order_by("-created_at")
            assert kept.count() == 2
            assert all(now - e.created_at < timedelta(days=2) for e in kept)

    def test_facts_by_age_and_checkpoints_per_thread_and_namespace(self):
        rule(self.workspace, Tier.FACTS, max_age_days=30)
        rule(self.workspace, Tier.CHECKPOINTS, keep_latest=1)
        old_fact = FactFactory(workspace=self.workspace)
        Fact.objects.filter(pk=old_fact.pk).update(updated_at=OLD)
        new_fact = FactFactory(workspace=self.workspace)
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        for ns in ("", "sub"):
            for n in range(3):
                make_checkpoint(thread, f"ckpt-{n}", ns=ns)
        run = retention_run(workspace=self.workspace)
        assert run.deleted == {"facts": 1, "checkpoints": 4}
        assert list(Fact.objects.values_list("pk", flat=True)) == [new_fact.pk]
        assert sorted(Checkpoint.objects.values_list("checkpoint_ns", "checkpoint_id")) == [
            ("", "ckpt-2"),
            ("sub", "ckpt-2"),
        ]

    def test_the_agents_thread_retention_days_is_applied_by_the_same_engine(self):
        agent_update(agent=self.agent, memory_settings={"retention_days": 10})
        idle = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        held = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.bo)
        active = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        Thread.objects.filter(pk__in=[idle.pk, held.pk]).update(last_activity_at=OLD)
        memory_user_hold_place(memory_user=self.bo, reason="Case 7", actor="test")
        run = retention_run(workspace=self.workspace)
        assert run.deleted == {"threads": 1}
        assert set(Thread.objects.values_list("pk", flat=True)) == {held.pk, active.pk}
        # A threads rule replaces the setting.
        rule(self.workspace, Tier.THREADS, max_age_days=100)
        Thread.objects.filter(pk=active.pk).update(last_activity_at=OLD)
        assert retention_preview(workspace=self.workspace)["deletes"]["threads"] == 0

    def test_messages_go_only_once_a_summary_holds_them(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 4})
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        append(
            thread,
            *[("user" if i % 2 == 0 else "assistant", f"Turn {i} about invoice {i}.") for i in range(12)],
        )
        Message.objects.filter(thread=thread).update(created_at=OLD)
        rule(self.workspace, Tier.MESSAGES, max_age_days=30)

        # No summary yet: nothing may go, and the run asks for a compaction.
        preview = retention_preview(workspace=self.workspace)
        assert preview["deletes"]["messages"] == 0 and preview["messages_waiting_for_summary"] == 12
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            run = retention_run(workspace=self.workspace)
        assert run.deleted == {"messages": 0} and len(callbacks) == 1
        assert Thread.objects.get(pk=thread.pk).compaction_requested_at is not None

        assert thread_compact(thread_id=thread.pk) == "compacted"
        thread.refresh_from_db()
        covered = thread.summary_upto_depth
        assert covered is not None and covered > 0
        before = message_history_window(thread=thread)
        run = retention_run(workspace=self.workspace)
        assert run.deleted == {"messages": covered}
        left = Message.objects.filter(thread=thread).order_by("depth")
        assert left.count() == 12 - covered and left.first().depth == covered
        assert left.first().parent_id is None
        # The window the agent sees is unchanged: the summary, then the recent turns.
        after = message_history_window(thread=thread)
        assert after.summary_applied and after.messages == before.messages

    def test_a_second_run_waits_for_the_first_and_a_dead_one_is_taken_over(self):
        rule(self.workspace, Tier.EPISODES, max_age_days=1)
        running = RetentionRun.objects.create(workspace=self.workspace)
        assert retention_run(workspace=self.workspace) is None
        RetentionRun.objects.filter(pk=running.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
        run = retention_run(workspace=self.workspace)
        assert run is not None and run.state == RetentionRun.State.DONE
        assert RetentionRun.objects.get(pk=running.pk).state == RetentionRun.State.ABANDONED
