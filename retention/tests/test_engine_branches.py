"""Retention deletes only the messages a summary holds alone, across branches and
repeated compactions, and the preview counts exactly what the run deletes."""

from datetime import timedelta

from django.utils import timezone

from core.services import agent_update
from core.testing import MemoryTestCase
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, Tier
from retention.selectors import retention_preview
from retention.services import retention_run
from threads.models import Message, Thread
from threads.selectors import message_history_window
from threads.services import thread_compact
from threads.tests.factories import append, make_thread

OLD = timezone.now() - timedelta(days=40)


def turns(label, count, first="user"):
    other = "assistant" if first == "user" else "user"
    return [(first if i % 2 == 0 else other, f"{label} turn {i}, invoice {i}.") for i in range(count)]


class RetentionBranchesTests(MemoryTestCase):
    def setUp(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 4})
        ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=ada)
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.MESSAGES, max_age_days=30)

    def windows(self, *leaves):
        thread = Thread.objects.get(pk=self.thread.pk)
        return [
            message_history_window(thread=thread, leaf=leaf.pk, max_messages=500, max_tokens=100_000).messages
            for leaf in leaves
        ]

    def compact(self):
        assert thread_compact(thread_id=self.thread.pk) == "compacted"
        return Thread.objects.get(pk=self.thread.pk)

    def run_and_check(self, *leaves):
        """The run deletes what the preview counted, and no leaf's window changes."""
        Message.objects.filter(thread=self.thread).update(created_at=OLD)
        before = self.windows(*leaves)
        count = Message.objects.count()
        preview = retention_preview(workspace=self.workspace)["deletes"]["messages"]
        run = retention_run(workspace=self.workspace)
        assert run.deleted == {"messages": preview}
        assert Message.objects.count() == count - preview
        assert self.windows(*leaves) == before
        return preview

    def test_repeated_compactions_of_one_branch_hold_every_message_above_the_last_end(self):
        append(self.thread, *turns("First", 12))
        first_end = self.compact().summary_upto_depth
        last = append(self.thread, *turns("Second", 10))[-1]
        thread = self.compact()
        assert thread.summary_upto_depth > first_end
        held = Message.objects.summarized().filter(thread=self.thread)
        assert sorted(held.values_list("depth", flat=True)) == list(range(thread.summary_upto_depth))

        assert self.run_and_check(last) == thread.summary_upto_depth

    def test_a_regenerated_answer_keeps_the_turns_both_answers_follow(self):
        first = append(self.thread, *turns("Old", 6))
        # The answer at depth 3 is regenerated: both branches read depths 0 to 2.
        second = append(
            self.thread,
            {"role": "assistant", "content": "Regenerated answer 3.", "parent": str(first[2].pk)},
            *turns("New", 12, first="user"),
        )
        thread = self.compact()
        assert thread.summary_upto_depth > 4
        held = Message.objects.summarized().filter(thread=self.thread)
        assert sorted(held.values_list("depth", flat=True)) == list(range(3, thread.summary_upto_depth))
        assert not held.filter(pk__in=[m.pk for m in first]).exists()

        assert self.run_and_check(first[-1], second[-1]) == thread.summary_upto_depth - 3
        assert Message.objects.filter(pk__in=[m.pk for m in first]).count() == len(first)

    def test_a_summary_restarted_on_an_edited_branch_drops_the_old_branchs_marks(self):
        first = append(self.thread, *turns("Old", 12))
        old_end = self.compact().summary_upto_depth
        # An edit of turn 2 after the summary: the old branch forks at depth 1.
        assert set(
            Message.objects.summarized().filter(thread=self.thread).values_list("depth", flat=True)
        ) == set(range(old_end))
        edited = append(
            self.thread,
            {"role": "user", "content": "Edited turn 2 about Lisbon.", "parent": str(first[1].pk)},
            *turns("Lisbon", 14, first="assistant"),
        )
        assert not Message.objects.summarized().filter(thread=self.thread, depth__lte=1).exists()
        # The next summary is of the edited branch: nothing of the old one is held any more.
        thread = self.compact()
        held = Message.objects.summarized().filter(thread=self.thread)
        assert not held.filter(pk__in=[m.pk for m in first]).exists()
        assert sorted(held.values_list("depth", flat=True)) == list(range(2, thread.summary_upto_depth))

        assert self.run_and_check(first[-1], edited[-1]) == thread.summary_upto_depth - 2
        assert Message.objects.filter(pk__in=[m.pk for m in first]).count() == len(first)
