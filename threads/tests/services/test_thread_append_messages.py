import threading

import pytest
from django.db import connection
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from core.errors import ApplicationError
from core.lib.tokens import count_tokens
from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from threads.lib.tree import ancestor_at_depth
from threads.models import Message, Thread
from threads.services import thread_append_messages, thread_resolve
from threads.tests.factories import append, make_thread


class AppendTests(MemoryTestCase):
    def test_token_counts_are_computed_on_write(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        (message,) = append(thread, ("user", "The quick brown fox jumps over the lazy dog."))
        assert message.token_count == count_tokens("The quick brown fox jumps over the lazy dog.") + 4
        assert message.branch_tokens == message.token_count

    def test_jump_pointers_find_any_ancestor(self):
        """The ancestor at every depth of a 300-message branch is found through jump pointers."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = []
        for chunk in range(3):
            stored += append(thread, *[("user", f"m{chunk}-{i}") for i in range(100)])
        leaf = stored[-1]
        for depth in (0, 1, 2, 63, 64, 150, 298, 299):
            assert ancestor_at_depth(start_id=leaf.pk, target_depth=depth) == stored[depth].pk
        assert ancestor_at_depth(start_id=stored[10].pk, target_depth=200) is None

    def test_an_append_reads_and_writes_the_threads_row_once_each(self):
        """The row is locked with every column the append uses (none read again on access)
        and its counters are written in one statement."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "Hello"))
        with CaptureQueriesContext(connection) as queries:
            append(thread, ("assistant", "Hi"), ("user", "Any flights to Porto?"))
        on_thread = [q["sql"] for q in queries if "threads_thread" in q["sql"]]
        assert len(on_thread) == 2, on_thread
        assert on_thread[0].endswith("FOR UPDATE") and on_thread[1].startswith("UPDATE threads_thread")
        reloaded = Thread.objects.get(pk=thread.pk)
        assert (reloaded.message_seq, reloaded.message_count) == (3, 3)

    def test_batch_is_atomic(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        with pytest.raises(ApplicationError) as caught:
            thread_append_messages(
                thread=thread,
                messages=[{"role": "user", "content": "ok"}, {"role": "user", "content": ""}],
            )
        assert "messages[1].content" in caught.value.fields
        assert not Message.objects.filter(thread=thread).exists()

    def test_duplicate_idempotency_keys_in_one_batch_are_rejected(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        with pytest.raises(ApplicationError) as caught:
            append(
                thread,
                {"role": "user", "content": "a", "idempotency_key": "k"},
                {"role": "user", "content": "b", "idempotency_key": "k"},
            )
        assert "messages[1].idempotency_key" in caught.value.fields

    def test_tool_result_must_answer_a_call_on_its_branch(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        user, call = append(
            thread,
            ("user", "q"),
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
        )
        with pytest.raises(ApplicationError):
            append(thread, {"role": "tool", "tool_call_id": "c1", "content": "r", "parent": str(user.pk)})
        (result,) = append(thread, {"role": "tool", "tool_call_id": "c1", "content": "r"})
        assert result.parent_id == call.pk


class JumpPointerShapeTests(MemoryTestCase):
    def test_batches_build_the_same_pointers_as_single_appends(self):
        """Appending in batches of any size gives each message the canonical skew-binary jump."""
        from threads.lib.tree import TreeNode, child_position

        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = []
        for size in (1, 7, 50, 3, 120, 1, 64):
            stored += append(thread, *[("user", "x")] * size)
        expected: dict = {}
        previous = None
        for message in stored:
            parent = expected.get(previous.pk) if previous else None
            parent_jump = expected.get(parent.jump_id) if parent else None
            depth, jump_id, jump_depth = child_position(parent, parent_jump, own_id=message.pk)
            expected[message.pk] = TreeNode(message.pk, depth, jump_id, jump_depth, 0)
            assert (message.depth, message.jump_id, message.jump_depth) == (depth, jump_id, jump_depth)
            previous = message


class ConcurrentAppendTests(TransactionTestCase):
    def test_appends_racing_on_one_thread_chain_in_order(self):
        """The thread's row lock serializes appends: sequence numbers stay unique and gapless,
        every message's default parent is the one stored before it, and the counters add up."""
        workspace = workspace_create(name="Append race")
        agent = agent_get_or_create(workspace=workspace, slug="racer")
        thread = make_thread(workspace=workspace, agent=agent)
        barrier = threading.Barrier(4)
        failures = []

        def run(worker):
            try:
                barrier.wait()
                for turn in range(10):
                    message = {"role": "user", "content": f"{worker}-{turn}"}
                    thread_append_messages(thread=thread, messages=[message])
            except Exception as exc:  # Reported below, in the test's thread.
                failures.append(exc)
            finally:
                connection.close()

        workers = [threading.Thread(target=run, args=(worker,)) for worker in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert failures == []
        stored = list(Message.objects.filter(thread=thread).order_by("seq"))
        assert [m.seq for m in stored] == list(range(1, 41))
        assert [m.parent_id for m in stored] == [None] + [m.pk for m in stored[:-1]]
        assert [m.depth for m in stored] == list(range(40))
        reloaded = Thread.objects.get(pk=thread.pk)
        assert (reloaded.message_seq, reloaded.message_count) == (40, 40)
        assert reloaded.last_activity_at == max(m.created_at for m in stored)


class ThreadResolveTests(MemoryTestCase):
    def test_a_resolved_thread_carries_the_agent_it_was_matched_on(self):
        first = thread_resolve(workspace=self.workspace, agent=self.agent, channel_chat_id="chat-1")
        with self.assertNumQueries(4):  # A savepoint, the advisory lock, the lookup, its release.
            again = thread_resolve(workspace=self.workspace, agent=self.agent, channel_chat_id="chat-1")
        assert again == first
        with self.assertNumQueries(0):
            assert again.agent is self.agent
