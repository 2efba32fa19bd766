from browser.tests.base import BrowserTestCase
from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_put, checkpoint_writes_put
from threads.tests.factories import make_thread


class CheckpointsTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent, title="Approval flow")
        cls.checkpoints = [
            checkpoint_put(
                thread=cls.thread,
                checkpoint_id=f"cp-{n:03d}",
                type="json",
                data=b'{"step": %d}' % n,
                metadata={"source": "loop" if n % 2 else "input"},
            )[0]
            for n in range(5)
        ]
        checkpoint_writes_put(
            checkpoint=cls.checkpoints[-1],
            task_id="task-1",
            writes=[{"idx": 0, "channel": "messages", "type": "json", "data": b"{}"}],
        )
        foreign_thread = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent)
        cls.foreign = checkpoint_put(
            thread=foreign_thread, checkpoint_id="globex-cp", type="json", data=b"{}"
        )[0]

    def test_full_page_and_fragments_in_bounded_queries(self):
        url = self.url("memories:checkpoints")
        self.open_as(self.viewer, url)
        # session, user, memberships, count, page of ids, rows with threads, pending writes,
        # the Review tab's count.
        with self.assertNumQueries(8):
            response = self.client.get(url)
        assert b'data-total="5"' in response.content and b"globex-cp" not in response.content
        for n in range(10):
            checkpoint_put(thread=self.thread, checkpoint_id=f"more-{n}", type="json", data=b"{}")
        with self.assertNumQueries(7):
            fragment = self.htmx("get", url, target="results")
        assert b"<html" not in fragment.content and b'data-total="15"' in fragment.content

    def test_metadata_filter_from_the_api(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:checkpoints") + '?metadata={"source": "loop"}')
        assert b'data-total="2"' in response.content
        response = self.client.get(self.url("memories:checkpoints") + "?metadata=nope")
        assert response.status_code == 200 and b"These filters cannot be applied" in response.content

    def test_detail_shows_pending_writes(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:checkpoint", pk=self.checkpoints[-1].pk))
        assert b"Pending writes" in response.content and b"task-1" in response.content

    def test_viewer_cannot_delete(self):
        self.login(self.viewer)
        assert b"Delete selected" not in self.client.get(self.url("memories:checkpoints")).content
        response = self.client.post(
            self.url("memories:checkpoints-delete"), {"ids": [self.checkpoints[0].pk]}
        )
        assert response.status_code == 403
        assert Checkpoint.objects.filter(pk=self.checkpoints[0].pk).exists()

    def test_batch_delete(self):
        self.login(self.teammate)
        ids = [c.pk for c in self.checkpoints[:3]]
        response = self.htmx("post", self.url("memories:checkpoints-delete"), {"ids": ids}, target="results")
        assert "Deleted 3 checkpoints." in response["HX-Trigger"]
        assert b'data-total="2"' in response.content

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:checkpoints")).status_code == 404
        own = self.url("memories:checkpoint", pk=self.checkpoints[0].pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(own).status_code == 404
