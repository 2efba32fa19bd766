"""Tool calls and their results in the history window (threads.selectors.window)."""

from core.testing import MemoryTestCase
from threads.selectors import message_history_window
from threads.tests.factories import append, make_thread


def _call(call_id):
    return {"id": call_id, "name": "lookup", "arguments": {"q": call_id}}


class ManyParallelToolResultsTests(MemoryTestCase):
    def test_the_newest_unit_is_kept_when_its_results_outnumber_the_rows_read(self):
        """An assistant turn with 40 parallel tool calls, read with max_messages=5: the walk
        reads max_messages + 32 rows, all of them results, and the window came back empty
        (no message at all) instead of keeping the newest unit whole as documented."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "look up forty things"))
        stored = append(
            thread,
            {"role": "assistant", "content": "", "tool_calls": [_call(f"c{i}") for i in range(40)]},
            *[{"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"} for i in range(40)],
        )

        window = message_history_window(thread=thread, max_messages=5)

        assert window.message_ids == [str(m.pk) for m in stored]
        assert window.messages[0]["role"] == "assistant"
        assert len(window.messages[0]["tool_calls"]) == 40
        assert [m["tool_call_id"] for m in window.messages[1:]] == [f"c{i}" for i in range(40)]
        assert window.cut_count == 1

    def test_an_older_unit_cut_by_the_rows_read_still_leaves_the_newer_ones(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(
            thread,
            ("user", "look up forty things"),
            {"role": "assistant", "content": "", "tool_calls": [_call(f"c{i}") for i in range(40)]},
            *[{"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"} for i in range(40)],
        )
        newest = append(thread, ("assistant", "Done."), ("user", "thanks"))

        window = message_history_window(thread=thread, max_messages=5)

        assert window.message_ids == [str(m.pk) for m in newest]


class UnansweredToolCallTests(MemoryTestCase):
    def test_a_call_left_without_a_result_is_not_sent_once_the_conversation_moved_on(self):
        """The user interrupted a run after the model called two tools and only one result
        was stored. Every window holding that turn sent `tool_calls` with an id no tool
        message answers, which OpenAI and Anthropic refuse (400), so each later request of
        the conversation failed. The unanswered call is left out; the answered one stays."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = append(
            thread,
            ("user", "Weather in Paris and Rome?"),
            {"role": "assistant", "content": "Checking.", "tool_calls": [_call("c1"), _call("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "Paris: 21C"},
            ("user", "Never mind, just Paris."),
        )

        window = message_history_window(thread=thread)

        assert window.message_ids == [str(m.pk) for m in stored]
        call = window.messages[1]
        assert call["content"] == "Checking."
        assert [c["id"] for c in call["tool_calls"]] == ["c1"]
        answered = {m["tool_call_id"] for m in window.messages if m["role"] == "tool"}
        for message in window.messages:
            assert {c["id"] for c in message.get("tool_calls", [])} <= answered

    def test_a_call_with_no_result_and_no_text_is_left_out_whole(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        first, _call_message, last = append(
            thread,
            ("user", "Book the flight."),
            {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
            ("user", "Stop, do not book it."),
        )

        window = message_history_window(thread=thread)

        assert [m["content"] for m in window.messages] == ["Book the flight.", "Stop, do not book it."]
        assert window.message_ids == [str(first.pk), str(last.pk)]
        assert window.tokens == first.token_count + last.token_count

    def test_the_newest_turn_keeps_its_pending_call(self):
        """A call just made, its results not stored yet, is the state the runtime works on."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(
            thread,
            ("user", "Book the flight."),
            {"role": "assistant", "content": "", "tool_calls": [_call("c1"), _call("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "booked"},
        )

        window = message_history_window(thread=thread)

        assert [c["id"] for c in window.messages[1]["tool_calls"]] == ["c1", "c2"]
