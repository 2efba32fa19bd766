"""The checkpoint API against LangGraph's BaseCheckpointSaver contract, as MemoryServerSaver
drives it (clients/python/memory_client/langgraph.py): the exact query strings and write
batches a LangGraph run sends."""

import base64
import json

from checkpoints.models import CheckpointWrite
from checkpoints.tests.factories import make_checkpoint
from core.testing import MemoryTestCase
from threads.tests.factories import make_thread

# langgraph.checkpoint.base.WRITES_IDX_MAP: the index a saver stores each special channel at.
INTERRUPT_IDX = -3
RESUME_IDX = -4


def typed(value) -> dict:
    return {"type": "json", "data": base64.b64encode(json.dumps(value).encode()).decode()}


class RootNamespaceListTests(MemoryTestCase):
    """`saver.list(config)` sends `checkpoint_ns=` for the root graph (LangGraph's
    `get_state_history` always sets it): the root's checkpoints only, as every LangGraph
    saver answers; with no `checkpoint_ns` at all, every namespace."""

    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.url = f"/api/v1/threads/{self.thread.pk}/checkpoints/"
        make_checkpoint(self.thread, "1ef-001")
        make_checkpoint(self.thread, "1ef-002", ns="child:1")
        make_checkpoint(self.thread, "1ef-003", ns="child:2")

    def test_an_empty_namespace_lists_the_root_graph_only(self):
        response = self.api().get(self.url, {"checkpoint_ns": ""})
        assert response.status_code == 200
        assert [(c["checkpoint_ns"], c["checkpoint_id"]) for c in response.json()["results"]] == [
            ("", "1ef-001")
        ]

    def test_an_empty_namespace_with_before_and_metadata_stays_in_the_root(self):
        make_checkpoint(self.thread, "1ef-004", ns="child:1", metadata={"source": "loop"})
        make_checkpoint(self.thread, "1ef-005", metadata={"source": "loop"})
        client = self.api()
        page = client.get(self.url, {"checkpoint_ns": "", "before": "1ef-005"}).json()["results"]
        assert [c["checkpoint_id"] for c in page] == ["1ef-001"]
        loops = client.get(self.url, {"checkpoint_ns": "", "metadata": '{"source": "loop"}'}).json()
        assert [c["checkpoint_id"] for c in loops["results"]] == ["1ef-005"]

    def test_no_namespace_still_lists_every_namespace(self):
        response = self.api().get(self.url)
        assert [c["checkpoint_id"] for c in response.json()["results"]] == ["1ef-003", "1ef-002", "1ef-001"]
        child = self.api().get(self.url, {"checkpoint_ns": "child:1"}).json()["results"]
        assert [c["checkpoint_id"] for c in child] == ["1ef-002"]


class RepeatedSpecialWritesTests(MemoryTestCase):
    """A node that calls `interrupt()` three times: resumed for the second time, its task
    commits `[(INTERRUPT, ...), (RESUME, ["a"]), (RESUME, ["a", "b"])]` in one put_writes
    (langgraph.pregel._runner.PregelRunner.commit). Both resumes map to idx -4; LangGraph's
    savers keep the last one (InMemorySaver's dict, PostgresSaver's upsert)."""

    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        make_checkpoint(self.thread, "c1")
        self.url = f"/api/v1/threads/{self.thread.pk}/checkpoints/c1/writes/"

    def test_the_last_write_of_a_special_channel_wins(self):
        body = {
            "task_id": "task-1",
            "task_path": "~__pregel_pull, ask",
            "writes": [
                {"idx": INTERRUPT_IDX, "channel": "__interrupt__", "value": typed([{"value": "q3"}])},
                {"idx": RESUME_IDX, "channel": "__resume__", "value": typed(["a"])},
                {"idx": RESUME_IDX, "channel": "__resume__", "value": typed(["a", "b"])},
            ],
        }
        response = self.api().put(self.url, body, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["stored"] == 2
        stored = {w.idx: (w.channel, json.loads(bytes(w.data))) for w in CheckpointWrite.objects.all()}
        assert stored == {
            INTERRUPT_IDX: ("__interrupt__", [{"value": "q3"}]),
            RESUME_IDX: ("__resume__", ["a", "b"]),
        }
        # Sent again (a retried task), the same batch changes nothing and stays a 200.
        again = self.api().put(self.url, body, format="json")
        assert again.status_code == 200
        assert CheckpointWrite.objects.count() == 2

    def test_a_regular_idx_twice_in_one_batch_is_still_refused(self):
        write = {"idx": 0, "channel": "messages", "value": typed("hi")}
        response = self.api().put(self.url, {"task_id": "t", "writes": [write, write]}, format="json")
        assert response.status_code == 400
        assert "writes" in response.json()["error"]["fields"]
        assert CheckpointWrite.objects.count() == 0
