"""Appends replaying messages the thread holds (threads.services.messages)."""

import uuid

from core.testing import MemoryTestCase
from threads.models import Message
from threads.services import thread_append_messages
from threads.tests.factories import make_thread


class ReplayedImportTests(MemoryTestCase):
    def test_a_new_message_may_name_a_replayed_message_of_the_batch_as_its_parent(self):
        """A client syncing a conversation resends it whole, with its own ids and idempotency
        keys, plus a regenerated answer whose parent is one of the resent messages. The
        parent exists in this thread, yet the append was refused as "Unknown parent message"
        because a replayed message of the batch was never looked up."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        ids = [uuid.uuid4() for _ in range(12)]
        batch = [
            {
                "id": str(message_id),
                "role": "user" if n % 2 == 0 else "assistant",
                "content": f"turn {n}",
                "idempotency_key": f"turn-{n}",
            }
            for n, message_id in enumerate(ids)
        ]
        thread_append_messages(thread=thread, messages=batch)
        regenerated = {
            "id": str(uuid.uuid4()),
            "parent": str(ids[6]),
            "role": "assistant",
            "content": "turn 7, regenerated",
            "idempotency_key": "turn-7b",
        }

        stored = thread_append_messages(thread=thread, messages=[*batch, regenerated])

        assert [m.duplicate for m in stored] == [True] * 12 + [False]
        new = Message.objects.get(pk=regenerated["id"])
        parent = Message.objects.get(pk=ids[6])
        assert new.parent_id == parent.pk
        assert new.depth == parent.depth + 1
        assert new.branch_tokens == parent.branch_tokens + new.token_count
        assert Message.objects.filter(thread=thread).count() == 13
