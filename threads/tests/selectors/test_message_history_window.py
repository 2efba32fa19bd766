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


def _call(call_id, name="lookup"):
    return {"id": call_id, "name": name, "arguments": {"q": call_id}}


class ToolCallTests(MemoryTestCase):
    def test_a_tool_call_and_its_results_are_never_separated_at_the_cut(self):
        """When the limit would keep only the results, the whole call goes instead of half of it."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(
            thread,
            ("user", "weather in Paris and Rome?"),
            {"role": "assistant", "content": "", "tool_calls": [_call("c1"), _call("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "Paris: 21C"},
            {"role": "tool", "tool_call_id": "c2", "content": "Rome: 25C"},
            ("assistant", "Paris 21C, Rome 25C."),
        )

        window = message_history_window(thread=thread, max_messages=3)

        # Three would start at the orphan result "Paris"; the unit of four does not fit, so one is kept.
        assert [m["role"] for m in window.messages] == ["assistant"]
        assert window.messages[0]["content"] == "Paris 21C, Rome 25C."
        window = message_history_window(thread=thread, max_messages=4)
        assert [m["role"] for m in window.messages] == ["assistant", "tool", "tool", "assistant"]
        assert window.messages[0]["tool_calls"][0] == {
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "c1"}'},
        }
        assert window.messages[1]["tool_call_id"] == "c1"

    def test_window_never_starts_with_an_orphan_tool_result(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(
            thread,
            ("user", "q"),
            {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "result"},
        )
        window = message_history_window(thread=thread, max_messages=1)
        # The newest unit (call + result) is always included whole.
        assert [m["role"] for m in window.messages] == ["assistant", "tool"]

    def test_large_tool_results_are_archived_with_a_reference(self):
        """The window carries the id and a preview; the stored message keeps the whole result."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        big = "x" * 20_000
        _, _, result = append(
            thread,
            ("user", "fetch"),
            {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": big},
        )
        assert result.archived
        window = message_history_window(thread=thread)
        content = window.messages[-1]["content"]
        assert str(result.pk) in content
        assert "20000 characters" in content
        assert len(content) < 1_000
        assert result.token_count < 300


class ScopeTests(MemoryTestCase):
    def test_node_mode_sees_only_that_nodes_messages(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "main 1"), ("assistant", "main 2"))
        append(thread, ("user", "node q"), ("assistant", "node a"), node_id="classifier")
        append(thread, ("user", "main 3"))

        node_window = message_history_window(thread=thread, node="classifier")
        main_window = message_history_window(thread=thread)

        assert [m["content"] for m in node_window.messages] == ["node q", "node a"]
        assert [m["content"] for m in main_window.messages] == ["main 1", "main 2", "main 3"]

    def test_delegation_sees_top_level_and_its_own_tool_results_only(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "plan a trip"))
        append(
            thread,
            {"role": "assistant", "content": "", "tool_calls": [_call("a1", "flights")]},
            {"role": "tool", "tool_call_id": "a1", "content": "flight AF123"},
            delegation_id="d-flights",
            author_agent="flights",
        )
        append(
            thread,
            {"role": "assistant", "content": "", "tool_calls": [_call("b1", "hotels")]},
            {"role": "tool", "tool_call_id": "b1", "content": "hotel Ritz"},
            delegation_id="d-hotels",
            author_agent="hotels",
        )
        append(thread, ("assistant", "Booked."))

        window = message_history_window(thread=thread, delegation="d-flights")
        contents = [m["content"] for m in window.messages]

        assert "flight AF123" in contents
        assert "hotel Ritz" not in contents
        assert contents[0] == "plan a trip" and contents[-1] == "Booked."
        # Without a delegation the top-level agent sees everything.
        assert "hotel Ritz" in [m["content"] for m in message_history_window(thread=thread).messages]

    def test_files_are_references_and_can_be_omitted(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        files = [{"type": "image", "transfer_method": "remote_url", "url": "https://example.com/cat.png"}]
        append(thread, {"role": "user", "content": "what is this?", "files": files})

        with_files = message_history_window(thread=thread)
        without = message_history_window(thread=thread, files="omit")

        assert with_files.messages[0]["files"] == [{**files[0], "belongs_to": "user"}]
        assert "files" not in without.messages[0]


class SummaryTests(MemoryTestCase):
    def _compacted_thread(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = append(thread, *[("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(10)])
        covered = stored[5]
        Thread.objects.filter(pk=thread.pk).update(
            summary="Alice booked flight AF123.",
            summary_upto_id=covered.pk,
            summary_upto_depth=covered.depth,
            summary_tokens=12,
            summary_covers_tokens=covered.branch_tokens,
        )
        thread.refresh_from_db()
        return thread, stored

    def test_summary_leads_the_window_and_replaces_what_it_covers(self):
        thread, stored = self._compacted_thread()

        window = message_history_window(thread=thread)

        assert window.summary_applied
        assert window.messages[0]["role"] == "system"
        assert "Alice booked flight AF123." in window.messages[0]["content"]
        assert [m["content"] for m in window.messages[1:]] == [f"turn {i}" for i in range(6, 10)]
        assert window.cut_count == 0
        assert window.tokens == 12 + sum(m.token_count for m in stored[6:])

    def test_summary_as_user_message_has_a_stable_id(self):
        thread, _ = self._compacted_thread()
        window = message_history_window(thread=thread, system_as="user")
        assert window.messages[0]["role"] == "user"
        assert window.messages[0]["id"] == f"summary-{thread.pk}"
        assert window.summary_id == f"summary-{thread.pk}"

    def test_summary_of_another_branch_is_not_applied(self):
        """A regeneration from before the summarized point starts a branch the summary does not cover."""
        thread, stored = self._compacted_thread()
        (regen,) = append(
            thread, {"role": "assistant", "content": "other answer", "parent": str(stored[2].pk)}
        )

        window = message_history_window(thread=thread)

        assert not window.summary_applied
        assert [m["content"] for m in window.messages] == ["turn 0", "turn 1", "turn 2", "other answer"]

    def test_summary_is_not_applied_in_node_mode(self):
        thread, _ = self._compacted_thread()
        append(thread, ("user", "node only"), node_id="n1")
        window = message_history_window(thread=thread, node="n1")
        assert not window.summary_applied
        assert [m["content"] for m in window.messages] == ["node only"]


class QueryCountTests(MemoryTestCase):
    def test_window_reads_a_bounded_number_of_queries(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, *[("user", f"m{i}") for i in range(60)])
        thread = Thread.objects.select_related("agent").get(pk=thread.pk)
        # One statement: leaf, summary ancestry check and bounded walk.
        with self.assertNumQueries(1):
            message_history_window(thread=thread)

    def test_window_with_a_summary_is_still_one_query(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = append(thread, *[("user", f"m{i}") for i in range(60)])
        covered = stored[30]
        Thread.objects.filter(pk=thread.pk).update(
            summary="s", summary_upto_id=covered.pk, summary_upto_depth=covered.depth, summary_tokens=5
        )
        thread = Thread.objects.select_related("agent").get(pk=thread.pk)
        with self.assertNumQueries(1):
            window = message_history_window(thread=thread)
        assert window.summary_applied
