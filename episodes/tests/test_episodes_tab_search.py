"""The /memories episodes tab: text in the search box ranks episodes with the hybrid search."""

from django.urls import reverse

from core.testing import MemoryTestCase
from episodes.services import episode_create


class EpisodesTabSearchTests(MemoryTestCase):
    def setUp(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.kettle = episode_create(
                workspace=self.workspace,
                agent=self.agent,
                input={"goal": "Customer wants money back for a kettle"},
            )
            self.dentist = episode_create(
                workspace=self.workspace, agent=self.agent, input={"goal": "Book a dentist appointment"}
            )
        episode_create(
            workspace=self.other_workspace, agent=self.outsider_agent, input={"goal": "refund a kettle"}
        )
        self.url = reverse("memories:episodes", kwargs={"workspace_id": self.workspace.pk})

    def rows(self, response):
        assert response.status_code == 200
        html = response.content.decode()
        return [e for e in (self.kettle, self.dentist) if str(e.pk) in html], html

    def test_the_search_box_finds_by_meaning_best_first(self):
        """ "refund request" shares no word with the kettle episode; it is listed before the other."""
        self.login(self.owner)
        rows, html = self.rows(self.client.get(self.url, {"q": "refund request"}))
        assert rows == [self.kettle, self.dentist]
        assert html.index(str(self.kettle.pk)) < html.index(str(self.dentist.pk))
        assert "refund a kettle" not in html
        # Sorting by a column still works on the search results, and sort=relevance without a
        # query falls back to the default order.
        assert self.client.get(self.url, {"q": "refund request", "sort": "-started"}).status_code == 200
        assert self.client.get(self.url, {"sort": "-relevance"}).status_code == 200

    def test_a_query_over_the_limit_is_a_filter_error_not_a_500(self):
        self.login(self.owner)
        assert self.client.get(self.url, {"q": "x" * 5000}).status_code == 200

    def test_a_nul_in_the_search_box_is_a_filter_error(self):
        self.login(self.owner)
        assert self.client.get(self.url, {"q": "kettle\x00"}).status_code == 200
