"""The retention engine: what a run deletes, what it must leave, and what it must
keep in step with the rows it deletes."""

from datetime import timedelta

from django.utils import timezone

from checkpoints.models import Checkpoint
from checkpoints.tests.factories import make_checkpoint
from core.services import agent_update
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, Tier
from retention.selectors import retention_preview
from retention.services import retention_run
from threads.models import Message, Thread
from threads.selectors import message_history_window
from threads.services import thread_compact
from threads.tests.factories import append, make_thread

OLD = timezone.now() - timedelta(days=40)


def rule(workspace, tier, agent=None, **limits):
    return RetentionRule.objects.create(workspace=workspace, agent=agent, tier=tier, **limits)


class RetentionRuleTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")

    def remember(self, key, value, **kwargs):
        return fact_remember(
            workspace=self.workspace,
            key=key,
            value=value,
            scope=Fact.Scope.USER,
            memory_user=self.ada,
            **kwargs,
        ).fact

    def test_a_preference_deleted_by_age_leaves_the_persons_preferences(self):
        # The person's `preferences` mirror their current user_preference facts: the
        # API and the agent's context read the mirror, so it must follow the deletion.
        kept = self.remember("tone", "formal", fact_type=Fact.FactType.USER_PREFERENCE)
        gone = self.remember("language", "pt", fact_type=Fact.FactType.USER_PREFERENCE)
        Fact.objects.filter(pk=gone.pk).update(updated_at=OLD)
        rule(self.workspace, Tier.FACTS, max_age_days=30)
        before = self.api().get(f"/api/v1/memory-users/{self.ada.pk}/").json()["preferences"]
        assert before == {"tone": "formal", "language": "pt"}

        run = retention_run(workspace=self.workspace)

        assert run.deleted == {"facts": 1}
        assert list(Fact.objects.values_list("pk", flat=True)) == [kept.pk]
        after = self.api().get(f"/api/v1/memory-users/{self.ada.pk}/").json()["preferences"]
        assert after == {"tone": "formal"}

    def test_keep_the_newest_n_facts_never_deletes_a_current_value_for_old_versions(self):
        # Ada's name was told once; her city changed three times since. "Keep the newest 2"
        # must not forget her name while it keeps superseded cities.
        name = self.remember("name", "Ada")
        cities = [self.remember("city", city) for city in ("Porto", "Lisbon", "Faro")]
        for days, fact in zip((4, 3, 2, 1), (name, *cities), strict=True):
            Fact.objects.filter(pk=fact.pk).update(updated_at=timezone.now() - timedelta(days=days))
        # A closed version's updated_at is when it was closed: newer than the name.
        for closed, closing in zip(cities, cities[1:], strict=False):
            Fact.objects.filter(pk=closed.pk).update(
                updated_at=Fact.objects.get(pk=closing.pk).updated_at - timedelta(seconds=1)
            )
        rule(self.workspace, Tier.FACTS, keep_latest=2)

        preview = retention_preview(workspace=self.workspace)["deletes"]["facts"]
        run = retention_run(workspace=self.workspace)

        current = dict(Fact.objects.current().values_list("key", "value"))
        assert current == {"name": "Ada", "city": "Faro"}
        assert run.deleted == {"facts": preview}

    def test_an_agents_retention_days_applies_when_only_another_agent_has_a_threads_rule(self):
        agent_update(agent=self.agent, memory_settings={"retention_days": 10})
        rule(self.workspace, Tier.THREADS, agent=self.other_agent, max_age_days=365)
        idle = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        kept = make_thread(workspace=self.workspace, agent=self.other_agent, memory_user=self.ada)
        Thread.objects.filter(pk__in=[idle.pk, kept.pk]).update(last_activity_at=OLD)

        assert retention_preview(workspace=self.workspace)["deletes"]["threads"] == 1
        run = retention_run(workspace=self.workspace)

        assert run.deleted == {"threads": 1}
        assert list(Thread.objects.values_list("pk", flat=True)) == [kept.pk]

    def test_the_preview_counts_what_the_run_deletes_when_age_and_rank_orders_differ(self):
        # Checkpoints rank by their client id, age by created_at: an imported checkpoint can
        # be the newest by id and the oldest by age.
        rule(self.workspace, Tier.CHECKPOINTS, max_age_days=30, keep_latest=1)
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        for checkpoint_id in ("ckpt-1", "ckpt-2", "ckpt-3"):
            make_checkpoint(thread, checkpoint_id)
        Checkpoint.objects.filter(checkpoint_id="ckpt-3").update(created_at=OLD)

        preview = retention_preview(workspace=self.workspace)["deletes"]["checkpoints"]
        run = retention_run(workspace=self.workspace)

        assert run.deleted == {"checkpoints": preview}
        # The group keeps its newest surviving checkpoint.
        assert list(Checkpoint.objects.values_list("checkpoint_id", flat=True)) == ["ckpt-2"]


class RetentionBranchTests(MemoryTestCase):
    # The summary holds one branch: messages of another branch at the summary's depths, and
    # the turns before the edit that both branches read, are no summary's alone.
    def test_messages_of_a_branch_the_summary_does_not_hold_are_kept(self):
        ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        agent_update(agent=self.agent, memory_settings={"recent_messages": 4})
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=ada)
        first = append(
            thread,
            *[("user" if i % 2 == 0 else "assistant", f"Turn {i} about invoice {i}.") for i in range(12)],
        )
        assert thread_compact(thread_id=thread.pk) == "compacted"
        thread.refresh_from_db()
        covered = thread.summary_upto_depth
        assert covered is not None and covered > 4
        # The user edits turn 2: a new branch from depth 1, newer than the summary, which
        # summarizes the old branch and not this one.
        branch = append(
            thread,
            {
                "role": "user",
                "content": "Edited: turn 2 is about the Lisbon office.",
                "parent": str(first[1].pk),
            },
            *[("assistant" if i % 2 == 0 else "user", f"New turn {i} on Lisbon.") for i in range(covered)],
        )
        Message.objects.filter(thread=thread).update(created_at=OLD)
        before = message_history_window(thread=thread, leaf=branch[-1].pk, max_messages=50)
        assert not before.summary_applied
        rule(self.workspace, Tier.MESSAGES, max_age_days=30)

        retention_run(workspace=self.workspace)

        after = message_history_window(thread=thread, leaf=branch[-1].pk, max_messages=50)
        assert after.messages == before.messages
