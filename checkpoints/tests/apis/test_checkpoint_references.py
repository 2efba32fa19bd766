"""Issue 11, finding 2: checkpoint writes name threads through the key's read scope.

`agent_key` is bound to `agent`; a thread of `other_agent` must answer like a random id and
store nothing. `parent_checkpoint_id` is a label within the thread (LangGraph's), never
looked up, so it cannot tell which checkpoints exist elsewhere.
"""

import base64
import uuid

from checkpoints.models import Checkpoint, CheckpointWrite
from checkpoints.tests.factories import make_checkpoint
from core.testing import MemoryTestCase
from threads.tests.factories import make_thread


class CheckpointReferenceTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.foreign_thread = make_thread(workspace=cls.workspace, agent=cls.other_agent)
        make_checkpoint(thread=cls.foreign_thread, checkpoint_id="c1")

    def counts(self):
        return Checkpoint.objects.count(), CheckpointWrite.objects.count()

    def assert_like_a_random_thread(self, method, suffix, body):
        before = self.counts()
        api = self.api(self.agent_key)
        send = getattr(api, method)
        random = send(f"/api/v1/threads/{uuid.uuid4()}/checkpoints/{suffix}", body, format="json")
        foreign = send(f"/api/v1/threads/{self.foreign_thread.pk}/checkpoints/{suffix}", body, format="json")
        assert random.status_code == 404, random.json()
        assert (foreign.status_code, foreign.json()) == (random.status_code, random.json())
        assert self.counts() == before

    def test_putting_a_checkpoint_on_another_agents_thread_answers_like_a_random_id(self):
        """A checkpoint for another agent's thread: the 404 of an unknown thread."""
        body = {
            "checkpoint_id": "c2",
            "parent_checkpoint_id": "c1",
            "checkpoint": {"type": "msgpack", "data": base64.b64encode(b"state").decode()},
        }
        self.assert_like_a_random_thread("put", "", body)

    def test_writes_to_another_agents_checkpoint_answer_like_a_random_id(self):
        """Pending writes for another agent's checkpoint: the 404 of an unknown thread."""
        write = {"idx": 0, "channel": "messages", "value": {"type": "json", "data": "e30="}}
        self.assert_like_a_random_thread("put", "c1/writes/", {"task_id": "t", "writes": [write]})
