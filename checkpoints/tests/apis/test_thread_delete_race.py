"""Writes that reach a checkpoint or a thread while another request deletes it."""

import base64
import threading

from django.db import transaction
from django.test import TransactionTestCase

from checkpoints.models import Checkpoint, CheckpointWrite
from checkpoints.tests.factories import make_checkpoint
from core.testing import thread_started, until_a_backend_waits, workspace_api_client
from threads.models import Thread
from threads.tests.factories import make_thread


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


WRITES = {
    "checkpoint_ns": "",
    "task_id": "task-a",
    "writes": [{"idx": 0, "channel": "messages", "value": {"type": "json", "data": b64(b'"hi"')}}],
}


class ThreadDeleteRaceTests(TransactionTestCase):
    """The write found its thread and checkpoint, then waited on the delete's lock: the rows
    it refers to are gone when it inserts. Before, the foreign-key violation was a 500."""

    def setUp(self):
        self.workspace, self.agent, self.client_api = workspace_api_client()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.url = f"/api/v1/threads/{self.thread.pk}/checkpoints/"
        make_checkpoint(self.thread, "c1")

    def race(self, request):
        """`request()` runs while a delete of the thread holds its rows, then the delete commits."""
        locked, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        answers = []

        def delete():
            with transaction.atomic():
                Thread.objects.filter(pk=self.thread.pk).delete()
                locked.set()
                release.wait(30)

        deleting = thread_started(delete, errors)
        assert locked.wait(30)
        writing = thread_started(lambda: answers.append(request()), errors)
        until_a_backend_waits()
        release.set()
        deleting.join(30)
        writing.join(30)
        assert errors == []
        return answers[0]

    def test_pending_writes_to_a_checkpoint_deleted_meanwhile_are_a_404(self):
        response = self.race(lambda: self.client_api.put(f"{self.url}c1/writes/", WRITES, format="json"))

        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "not_found"
        assert not CheckpointWrite.objects.exists()

    def test_a_checkpoint_put_to_a_thread_deleted_meanwhile_is_a_404(self):
        body = {
            "checkpoint_ns": "",
            "checkpoint_id": "c2",
            "parent_checkpoint_id": "c1",
            "checkpoint": {"type": "msgpack", "data": b64(b"state")},
            "metadata": {},
        }
        response = self.race(lambda: self.client_api.put(self.url, body, format="json"))

        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "not_found"
        assert not Checkpoint.objects.exists()
