"""Compaction reads the branch's own messages, whatever the agent's semantic recall."""

from datetime import timedelta

from django.utils import timezone

from core.services import agent_update
from core.testing import MemoryTestCase
from identities.tests.factories import MemoryUserFactory
from threads.models import Message, Thread
from threads.selectors import message_history_window
from threads.services import thread_compact
from threads.tests.factories import append, make_thread


class CompactionWithSemanticRecallTests(MemoryTestCase):
    def setUp(self):
        agent_update(
            agent=self.agent,
            memory_settings={
                "semantic_recall": True,
                "semantic_recall_top_k": 3,
                "recent_messages": 50,
                "token_limit": 400,
            },
        )
        self.person = MemoryUserFactory(workspace=self.workspace)
        old = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        with self.captureOnCommitCallbacks(execute=True):
            append(
                old,
                ("user", "My dog Biscuit is a golden retriever who loves swimming in Geneva."),
                ("assistant", "Biscuit the retriever sounds lovely, the Geneva lake is great."),
                created_at=timezone.now() - timedelta(days=30),
            )
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        turns = [
            ("user" if i % 2 == 0 else "assistant", f"Turn {i}: invoice {100 + i} was paid on day {i}.")
            for i in range(40)
        ]
        turns.append(("user", "Does my dog Biscuit like swimming in the lake?"))
        with self.captureOnCommitCallbacks(execute=True):
            self.stored = append(self.thread, *turns)

    def test_the_summary_ends_where_the_window_without_recall_begins(self):
        """The recalled block's tokens do not move the summary's end: the tail left out of
        the summary is the branch's recent messages as the window reads them without recall."""
        thread = Thread.objects.select_related("agent").get(pk=self.thread.pk)
        with_recall = message_history_window(thread=thread)
        assert with_recall.recalled  # the block takes part of the budget
        plain = message_history_window(thread=thread, semantic_recall=False)
        assert len(plain.message_ids) > len(with_recall.message_ids)

        assert thread_compact(thread_id=thread.pk) == "compacted"

        thread.refresh_from_db()
        oldest_recent = Message.objects.get(pk=plain.message_ids[0])
        assert thread.summary_upto_id == oldest_recent.parent_id

    def test_the_summary_holds_the_branch_turns_in_order_and_no_recalled_turn(self):
        assert thread_compact(thread_id=self.thread.pk) == "compacted"
        thread = Thread.objects.get(pk=self.thread.pk)
        assert "Geneva" not in thread.summary and "retriever" not in thread.summary
        positions = [thread.summary.find(f"Turn {i}:") for i in range(4)]
        assert all(p >= 0 for p in positions) and positions == sorted(positions)
