from core.services import agent_update
from core.testing import MemoryTestCase
from threads.models import Thread
from threads.selectors import message_history_window
from threads.tests.factories import append, make_thread


class RegenerationBranchTests(MemoryTestCase):
    def test_dify_regeneration_example_follows_the_newest_branch(self):
        """A, A', B, B', A'' (regenerated from A), C, C' gives the window [A, A'', C, C']."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        a, a1, b, b1 = append(thread, ("user", "A"), ("assistant", "A'"), ("user", "B"), ("assistant", "B'"))
        (a2,) = append(thread, {"role": "assistant", "content": "A''", "parent": str(a.pk)})
        c, c1 = append(thread, ("user", "C"), ("assistant", "C'"))

        window = message_history_window(thread=thread)

        assert [m["content"] for m in window.messages] == ["A", "A''", "C", "C'"]
        assert window.message_ids == [str(a.pk), str(a2.pk), str(c.pk), str(c1.pk)]
        assert window.cut_count == 0
        assert not window.summary_applied

    def test_an_older_leaf_gives_its_own_branch(self):
        """Asking for the window at B' returns the branch before the regeneration."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        a, a1, b, b1 = append(thread, ("user", "A"), ("assistant", "A'"), ("user", "B"), ("assistant", "B'"))
        append(thread, {"role": "assistant", "content": "A''", "parent": str(a.pk)})

        window = message_history_window(thread=thread, leaf=b1.pk)

        assert [m["content"] for m in window.messages] == ["A", "A'", "B", "B'"]


class LimitTests(MemoryTestCase):
    def test_max_messages_keeps_the_newest_and_counts_the_cut(self):
        """Only the newest messages fit; the rest are reported as cut."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, *[("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(30)])

        window = message_history_window(thread=thread, max_messages=5)

        assert [m["content"] for m in window.messages] == [f"message {i}" for i in range(25, 30)]
        assert window.cut_count == 25

    def test_agent_defaults_apply(self):
        """Without limits the agent's recent_messages setting (default 20) applies."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, *[("user", f"m{i}") for i in range(25)])
        assert len(message_history_window(thread=thread).messages) == 20
        agent_update(agent=self.agent, memory_settings={"recent_messages": 3})
        thread = Thread.objects.select_related("agent").get(pk=thread.pk)
        assert len(message_history_window(thread=thread).messages) == 3

    def test_token_limit_keeps_what_fits(self):
        """The newest messages whose tokens fit the budget are kept, in order."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = append(thread, *[("user", "word " * 50) for _ in range(10)])
        per_message = stored[-1].token_count

        window = message_history_window(thread=thread, max_tokens=per_message * 3 + 1)

        assert len(window.messages) == 3
        assert window.tokens == per_message * 3
        assert window.cut_count == 7

    def test_newest_message_is_kept_even_when_larger_than_the_budget(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "short"), ("user", "long " * 500))
        window = message_history_window(thread=thread, max_tokens=10)
        assert len(window.messages) == 1
