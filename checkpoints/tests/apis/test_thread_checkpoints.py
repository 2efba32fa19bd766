import base64
import json

from checkpoints.models import Checkpoint, CheckpointWrite
from checkpoints.tests.factories import make_checkpoint
from core.testing import MemoryTestCase
from threads.tests.factories import make_thread


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class CheckpointPutGetTests(MemoryTestCase):
    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.url = f"/api/v1/threads/{self.thread.pk}/checkpoints/"

    def _put(self, checkpoint_id, *, parent=None, ns="", metadata=None, data=b"\x00\x01state", client=None):
        body = {
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent,
            "checkpoint": {"type": "msgpack", "data": b64(data)},
            "metadata": metadata or {},
        }
        return (client or self.api()).put(self.url, body, format="json")

    def test_put_is_an_idempotent_upsert(self):
        created = self._put("1ef-001", metadata={"step": 1})
        assert created.status_code == 201
        body = created.json()
        assert set(body) >= {
            "id",
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "checkpoint",
            "metadata",
            "created_at",
        }
        assert body["checkpoint"] == {"type": "msgpack", "data": b64(b"\x00\x01state")}
        again = self._put("1ef-001", metadata={"step": 1}, data=b"newer")
        assert again.status_code == 200
        assert again.json()["id"] == body["id"]
        assert Checkpoint.objects.filter(thread=self.thread).count() == 1
        assert bytes(Checkpoint.objects.get().data) == b"newer"

    def test_latest_and_by_id_carry_pending_writes(self):
        self._put("1ef-001")
        self._put("1ef-002", parent="1ef-001")
        self._put("1ef-009", ns="child")
        writes = {
            "checkpoint_ns": "",
            "task_id": "task-a",
            "task_path": "~__pregel_pull, node",
            "writes": [
                {"idx": 0, "channel": "messages", "value": {"type": "json", "data": b64(b'"hi"')}},
                {"idx": 1, "channel": "count", "value": {"type": "json", "data": b64(b"1")}},
            ],
        }
        client = self.api()
        put = client.put(f"{self.url}1ef-002/writes/", writes, format="json")
        assert put.status_code == 200
        assert put.json()["stored"] == 2
        # Idempotent per (checkpoint, task_id, idx).
        assert client.put(f"{self.url}1ef-002/writes/", writes, format="json").json()["stored"] == 0
        assert CheckpointWrite.objects.count() == 2

        latest = client.get(f"{self.url}latest/").json()
        assert latest["checkpoint_id"] == "1ef-002"
        assert latest["parent_checkpoint_id"] == "1ef-001"
        assert [(w["task_id"], w["idx"], w["channel"]) for w in latest["pending_writes"]] == [
            ("task-a", 0, "messages"),
            ("task-a", 1, "count"),
        ]
        assert latest["pending_writes"][0]["value"] == {"type": "json", "data": b64(b'"hi"')}
        assert (
            client.get(f"{self.url}latest/", {"checkpoint_ns": "child"}).json()["checkpoint_id"] == "1ef-009"
        )
        one = client.get(f"{self.url}1ef-001/").json()
        assert one["checkpoint_id"] == "1ef-001" and one["pending_writes"] == []
        assert client.get(f"{self.url}nope/").status_code == 404

    def test_empty_payloads_round_trip(self):
        """Regression: an empty base64 string skipped decoding and became a 500; LangGraph
        writes `("null", b"")` for None values."""
        assert self._put("empty", data=b"").status_code == 201
        client = self.api()
        body = {"task_id": "t", "writes": [{"idx": 0, "channel": "x", "value": {"type": "null", "data": ""}}]}
        assert client.put(f"{self.url}empty/writes/", body, format="json").status_code == 200
        latest = client.get(f"{self.url}latest/").json()
        assert latest["checkpoint"] == {"type": "msgpack", "data": ""}
        assert latest["pending_writes"][0]["value"] == {"type": "null", "data": ""}

    def test_special_writes_replace_regular_writes_keep_the_first(self):
        self._put("c1")
        client = self.api()

        def put(idx, data):
            body = {
                "task_id": "t",
                "writes": [{"idx": idx, "channel": "x", "value": {"type": "json", "data": b64(data)}}],
            }
            return client.put(f"{self.url}c1/writes/", body, format="json")

        put(0, b"1")
        put(0, b"2")
        put(-1, b"error 1")
        put(-1, b"error 2")
        stored = {w.idx: bytes(w.data) for w in CheckpointWrite.objects.all()}
        assert stored == {0: b"1", -1: b"error 2"}

    def test_list_newest_first_with_before_limit_and_metadata(self):
        for i in range(1, 6):
            self._put(f"1ef-00{i}", metadata={"source": "loop" if i % 2 else "input", "step": i})
        client = self.api()
        ids = [c["checkpoint_id"] for c in client.get(self.url).json()["results"]]
        assert ids == ["1ef-005", "1ef-004", "1ef-003", "1ef-002", "1ef-001"]
        page = client.get(self.url, {"before": "1ef-004", "limit": 2}).json()["results"]
        assert [c["checkpoint_id"] for c in page] == ["1ef-003", "1ef-002"]
        loops = client.get(self.url, {"metadata": json.dumps({"source": "loop"})}).json()["results"]
        assert [c["checkpoint_id"] for c in loops] == ["1ef-005", "1ef-003", "1ef-001"]
        bad = client.get(self.url, {"metadata": "[1, 2]"})
        assert bad.status_code == 400
        assert "metadata" in bad.json()["error"]["fields"]

    def test_bad_input_is_400(self):
        client = self.api()
        bad_data = {"checkpoint_id": "x", "checkpoint": {"type": "msgpack", "data": "not base64!"}}
        response = client.put(self.url, bad_data, format="json")
        assert response.status_code == 400
        assert "checkpoint" in response.json()["error"]["fields"]
        assert (
            client.put(self.url, {"checkpoint": {"type": "t", "data": ""}}, format="json").status_code == 400
        )
        self._put("c1")
        dup = {"task_id": "t", "writes": [{"idx": 0, "channel": "a", "value": {"type": "j", "data": ""}}] * 2}
        assert client.put(f"{self.url}c1/writes/", dup, format="json").status_code == 400
        missing = {"task_id": "t", "writes": [{"idx": 0, "channel": "a", "value": {"type": "j", "data": ""}}]}
        assert client.put(f"{self.url}nope/writes/", missing, format="json").status_code == 404
        assert Checkpoint.objects.count() == 1

    def test_delete_thread_checkpoints(self):
        self._put("c1")
        self._put("c2")
        make_checkpoint(make_thread(workspace=self.workspace, agent=self.agent), "keep")
        response = self.api().delete(self.url)
        assert response.json() == {"deleted": 2, "writes": 0}
        assert list(Checkpoint.objects.values_list("checkpoint_id", flat=True)) == ["keep"]

    def test_outsider_and_other_agent_get_404_read_only_cannot_write(self):
        self._put("c1")
        outsider = self.api(self.outsider_key)
        assert outsider.get(f"{self.url}latest/").status_code == 404
        assert self._put("c2", client=outsider).status_code == 404
        assert outsider.delete(self.url).status_code == 404
        other = make_thread(workspace=self.workspace, agent=self.other_agent)
        assert (
            self.api(self.agent_key).get(f"/api/v1/threads/{other.pk}/checkpoints/latest/").status_code == 404
        )
        assert self._put("c3", client=self.api(self.read_only_key)).status_code == 403
        assert Checkpoint.objects.count() == 1


class WorkspaceCheckpointApiTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.mine = make_thread(workspace=cls.workspace, agent=cls.agent)
        cls.researcher = make_thread(workspace=cls.workspace, agent=cls.other_agent)
        cls.theirs = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent)
        cls.c1 = make_checkpoint(cls.mine, "a1", metadata={"source": "loop"})
        cls.c2 = make_checkpoint(cls.mine, "a2", ns="sub")
        cls.c3 = make_checkpoint(cls.researcher, "b1")
        cls.c4 = make_checkpoint(cls.theirs, "z1")

    def test_list_is_scoped_and_filtered_in_bounded_queries(self):
        client = self.api()
        client.get("/api/v1/checkpoints/")
        with self.assertNumQueries(3):  # key, page (short: no count), pending writes
            response = client.get("/api/v1/checkpoints/")
        ids = {c["checkpoint_id"] for c in response.json()["results"]}
        assert ids == {"a1", "a2", "b1"}
        by_agent = client.get("/api/v1/checkpoints/", {"agent": "researcher"}).json()["results"]
        assert [c["checkpoint_id"] for c in by_agent] == ["b1"]
        by_ns = client.get("/api/v1/checkpoints/", {"checkpoint_ns": "sub"}).json()["results"]
        assert [c["checkpoint_id"] for c in by_ns] == ["a2"]
        bound = self.api(self.agent_key).get("/api/v1/checkpoints/").json()["results"]
        assert {c["checkpoint_id"] for c in bound} == {"a1", "a2"}

    def test_batch_delete_is_all_or_nothing(self):
        client = self.api()
        refused = client.post(
            "/api/v1/checkpoints/batch-delete/", {"ids": [str(self.c1.pk), str(self.c4.pk)]}, format="json"
        )
        assert refused.status_code == 404
        assert Checkpoint.objects.count() == 4
        bound = self.api(self.agent_key).post(
            "/api/v1/checkpoints/batch-delete/", {"ids": [str(self.c3.pk)]}, format="json"
        )
        assert bound.status_code == 404
        done = client.post(
            "/api/v1/checkpoints/batch-delete/", {"ids": [str(self.c1.pk), str(self.c2.pk)]}, format="json"
        )
        assert done.json() == {"deleted": 2, "writes": 0}
        assert set(Checkpoint.objects.values_list("checkpoint_id", flat=True)) == {"b1", "z1"}
        assert (
            self.api(self.read_only_key)
            .post("/api/v1/checkpoints/batch-delete/", {"ids": [str(self.c3.pk)]}, format="json")
            .status_code
            == 403
        )


class CheckpointQueryCountTests(MemoryTestCase):
    def test_latest_is_scoped_in_the_checkpoint_query(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        make_checkpoint(thread, "c1")
        client = self.api(self.agent_key)
        url = f"/api/v1/threads/{thread.pk}/checkpoints/latest/"
        client.get(url)
        with self.assertNumQueries(3):  # key, checkpoint (scoped through its thread), pending writes
            assert client.get(url).status_code == 200
