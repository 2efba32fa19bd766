"""What rolling compaction folds into a summary, and when (threads.services.compaction)."""

from core.models import Agent
from core.services import agent_update
from core.testing import MemoryTestCase
from threads.models import NodeSummary, Thread
from threads.selectors import message_history_window
from threads.services import thread_compact
from threads.tests.factories import append, make_thread


class SummaryScopeTests(MemoryTestCase):
    def setUp(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 2})
        self.thread = make_thread(workspace=self.workspace, agent=Agent.objects.get(pk=self.agent.pk))

    def test_a_nodes_summary_holds_only_that_nodes_messages(self):
        """A sub-agent's first message names the main turn that delegated to it as its parent.
        The node's summary folded in the main conversation above it (Lisbon), which its window
        never shows; it must summarize the node's own older messages only."""
        main = append(
            self.thread,
            ("user", "I moved to Lisbon in 2021."),
            ("assistant", "Noted, Lisbon since 2021."),
        )
        node = append(
            self.thread,
            {"role": "user", "content": "Research Paris hotels for 12 March.", "parent": str(main[-1].pk)},
            ("assistant", "Found Hotel Lutetia at 300 EUR."),
            ("user", "Check Hotel Bristol too."),
            ("assistant", "Bristol is 900 EUR."),
            node_id="researcher",
        )

        # The row a node compaction request creates (thread_compact_request).
        NodeSummary.objects.create(
            workspace_id=self.thread.workspace_id, thread=self.thread, node_id="researcher"
        )

        assert thread_compact(thread_id=self.thread.pk, node="researcher") == "compacted"

        summary = NodeSummary.objects.get(thread=self.thread, node_id="researcher")
        assert "Lutetia" in summary.summary
        assert "Lisbon" not in summary.summary
        assert summary.summary_upto_id == node[1].pk
        window = message_history_window(thread=self.thread, node="researcher", memory_mode="node")
        assert window.summary_applied
        assert window.message_ids == [str(m.pk) for m in node[2:]]

    def test_the_main_summary_holds_no_node_message(self):
        """The main conversation continues from a sub-agent's last message: the node's turns are
        never in the main window, and must not enter the main summary either."""
        (ask,) = append(self.thread, ("user", "Plan a trip to Rome on 3 May."))
        node = append(
            self.thread,
            {
                "role": "assistant",
                "content": "Internal note: Hotel Quirinale costs 250 EUR.",
                "parent": str(ask.pk),
            },
            node_id="researcher",
        )
        main = append(
            self.thread,
            {"role": "assistant", "content": "Booked for 3 May.", "parent": str(node[-1].pk)},
            ("user", "Thanks, what time is the train?"),
            ("assistant", "At 9 in the morning."),
        )

        assert thread_compact(thread_id=self.thread.pk) == "compacted"

        thread = Thread.objects.get(pk=self.thread.pk)
        assert "Rome" in thread.summary
        assert "Quirinale" not in thread.summary
        assert thread.summary_upto_id == main[0].pk


class CompactionAfterAnEditTests(MemoryTestCase):
    def test_a_long_branch_edited_from_an_early_turn_is_compacted_too(self):
        """The summary covers the old branch. Editing the second turn starts a new branch with
        none of it; the threshold estimate still subtracted the old summary's tokens, so the
        new branch passed the threshold without a compaction being queued, and its window
        dropped older turns with no summary of them."""
        agent_update(
            agent=self.agent,
            memory_settings={"model_context_window": 2000, "compaction_threshold": 0.5, "recent_messages": 4},
        )
        thread = make_thread(workspace=self.workspace, agent=Agent.objects.get(pk=self.agent.pk))
        old = append(thread, *[("user" if i % 2 == 0 else "assistant", "word " * 100) for i in range(14)])
        assert thread_compact(thread_id=thread.pk) == "compacted"
        covered = Thread.objects.get(pk=thread.pk).summary_covers_tokens
        assert covered > 1000

        # The compaction clears its request mark; a new request sets it again.
        assert Thread.objects.get(pk=thread.pk).compaction_requested_at is None

        new = append(
            thread,
            {"role": "user", "content": "edited " * 100, "parent": str(old[0].pk)},
            *[("assistant" if i % 2 == 0 else "user", "other " * 100) for i in range(10)],
        )

        # 1,100+ tokens on the new branch: past half of the 2,000-token context window.
        assert new[-1].branch_tokens > 1000
        assert new[-1].branch_tokens - covered < 1000
        assert Thread.objects.get(pk=thread.pk).compaction_requested_at is not None

    def test_a_branch_below_the_threshold_after_its_summary_queues_nothing(self):
        agent_update(
            agent=self.agent,
            memory_settings={"model_context_window": 2000, "compaction_threshold": 0.5, "recent_messages": 4},
        )
        thread = make_thread(workspace=self.workspace, agent=Agent.objects.get(pk=self.agent.pk))
        append(thread, *[("user" if i % 2 == 0 else "assistant", "word " * 100) for i in range(14)])
        assert thread_compact(thread_id=thread.pk) == "compacted"

        append(thread, ("user", "word " * 100))

        assert Thread.objects.get(pk=thread.pk).compaction_requested_at is None
