from core.testing import MemoryTestCase
from threads.models import ThreadPlan
from threads.tests.factories import make_thread


class PlanApiTests(MemoryTestCase):
    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.url = f"/api/v1/threads/{self.thread.pk}/plan/"

    def test_every_update_keeps_the_previous_version(self):
        client = self.api()
        assert client.get(self.url).status_code == 404
        assert client.put(self.url, {"plan": {"steps": ["a"]}}, format="json").json()["version"] == 1
        assert client.put(self.url, {"plan": {"steps": ["a", "b"]}}, format="json").json()["version"] == 2
        assert client.get(self.url).json()["plan"] == {"steps": ["a", "b"]}
        versions = client.get(self.url + "versions/").json()["results"]
        assert [v["version"] for v in versions] == [2, 1]
        assert versions[1]["plan"] == {"steps": ["a"]}
        assert ThreadPlan.objects.filter(thread=self.thread).count() == 2

    def test_bad_plan_is_400(self):
        response = self.api().put(self.url, {"plan": "just text"}, format="json")
        assert response.status_code == 400
        assert "plan" in response.json()["error"]["fields"]

    def test_outsider_and_read_only(self):
        assert self.api(self.outsider_key).get(self.url).status_code == 404
        assert self.api(self.outsider_key).put(self.url, {"plan": {}}, format="json").status_code == 404
        assert self.api(self.read_only_key).put(self.url, {"plan": {}}, format="json").status_code == 403


class RunSnapshotApiTests(MemoryTestCase):
    def test_latest_snapshot_per_run_is_kept(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        url = f"/api/v1/threads/{thread.pk}/runs/run-1/snapshot/"
        client = self.api()
        assert client.get(url).status_code == 404
        assert client.put(url, {"snapshot": {"agents": ["root"]}}, format="json").status_code == 201
        assert client.put(url, {"snapshot": {"agents": ["root", "child"]}}, format="json").status_code == 200
        assert client.get(url).json()["snapshot"] == {"agents": ["root", "child"]}
        assert self.api(self.outsider_key).get(url).status_code == 404


class IterationApiTests(MemoryTestCase):
    def test_attempts_number_themselves_and_filter_by_task(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        url = f"/api/v1/threads/{thread.pk}/iterations/"
        client = self.api()
        first = client.post(url, {"task": "fetch", "outcome": "failure", "error": "timeout"}, format="json")
        second = client.post(url, {"task": "fetch", "outcome": "success"}, format="json")
        client.post(url, {"task": "other", "outcome": "success"}, format="json")
        assert first.status_code == 201
        assert (first.json()["attempt"], second.json()["attempt"]) == (1, 2)
        fetch = client.get(url, {"task": "fetch"}).json()["results"]
        assert [(i["attempt"], i["outcome"], i["error"]) for i in fetch] == [
            (1, "failure", "timeout"),
            (2, "success", ""),
        ]
        assert client.post(url, {"task": "x", "outcome": "exploded"}, format="json").status_code == 400
        assert self.api(self.outsider_key).get(url).status_code == 404
