from browser.tests.base import BrowserTestCase
from identities.services import memory_user_identify
from threads.models import Thread
from threads.tests.factories import append, make_thread


class ThreadsTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = memory_user_identify(
            workspace=cls.workspace, channel="telegram", external_id="7"
        ).memory_user
        cls.thread = make_thread(
            workspace=cls.workspace, agent=cls.agent, memory_user=cls.person, title="Trip planning"
        )
        question, first_answer = append(
            cls.thread, ("user", "Plan a trip to Lisbon"), ("assistant", "First draft")
        )
        # A regenerated answer: a second child of the same question.
        append(cls.thread, {"role": "assistant", "content": "Regenerated draft", "parent": str(question.pk)})
        cls.others = [
            make_thread(workspace=cls.workspace, agent=cls.other_agent, title=f"other {n}") for n in range(3)
        ]
        cls.foreign = make_thread(
            workspace=cls.other_workspace, agent=cls.outsider_agent, title="Globex plans"
        )

    def test_full_page_and_fragments_in_bounded_queries(self):
        url = self.url("memories:threads")
        self.open_as(self.viewer, url)
        # One more for the Review tab's count (browser.selectors.review).
        with self.assertNumQueries(7):
            response = self.client.get(url)
        assert b'data-total="4"' in response.content
        assert b"Trip planning" in response.content and b"Globex plans" not in response.content
        for n in range(10):
            make_thread(
                workspace=self.workspace, agent=self.agent, memory_user=self.person, title=f"more {n}"
            )
        with self.assertNumQueries(6):
            fragment = self.htmx("get", url, target="results")
        assert b"<html" not in fragment.content and b'data-total="14"' in fragment.content

    def test_filters_from_the_api(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:threads") + f"?memory_user={self.person.pk}")
        assert b'data-total="1"' in response.content
        response = self.client.get(self.url("memories:threads") + "?q=trip&agent=assistant")
        assert b'data-total="1"' in response.content

    def test_detail_shows_branches_and_the_history_window(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:thread", pk=self.thread.pk))
        content = response.content.decode()
        assert "Plan a trip to Lisbon" in content and "Regenerated draft" in content
        assert "2 branches here, branch 2 is shown below" in content
        # The window follows the newest branch: the question and the regenerated answer.
        assert content.count("in-window") == 2
        assert "History window" in content and "Summary" in content

    def test_cancelling_an_inline_rename_gets_the_row_back(self):
        self.login(self.teammate)
        url = self.url("memories:thread", pk=self.thread.pk)
        row = self.htmx("get", url, target=f"row-{self.thread.pk}").content.decode()
        assert row.lstrip().startswith(f'<tr id="row-{self.thread.pk}"') and "Trip planning" in row

    def test_editor_renames_inline(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:thread-edit", pk=self.thread.pk),
            {"title": "Lisbon trip"},
            target=f"row-{self.thread.pk}",
        )
        assert "Saved thread" in response["HX-Trigger"]
        assert Thread.objects.get(pk=self.thread.pk).title == "Lisbon trip"

    def test_viewer_cannot_rename_or_delete(self):
        self.login(self.viewer)
        assert b"Rename" not in self.client.get(self.url("memories:threads")).content
        assert (
            self.client.post(self.url("memories:thread-edit", pk=self.thread.pk), {"title": "x"}).status_code
            == 403
        )
        assert (
            self.client.post(self.url("memories:threads-delete"), {"ids": [self.thread.pk]}).status_code
            == 403
        )
        assert Thread.objects.filter(pk=self.thread.pk, title="Trip planning").exists()

    def test_batch_delete_reports_what_cascaded(self):
        self.login(self.teammate)
        response = self.htmx(
            "post", self.url("memories:threads-delete"), {"ids": [self.thread.pk]}, target="results"
        )
        assert "Deleted 1 thread." in response["HX-Trigger"]
        assert "3 messages" in response["HX-Trigger"]
        assert not Thread.objects.filter(pk=self.thread.pk).exists()

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:threads")).status_code == 404
        own = self.url("memories:thread", pk=self.thread.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(own).status_code == 404
