from browser.tests.base import BrowserTestCase
from browser.tests.factories import entry_make, memory_user_make
from episodic.models import EpisodicEntry


class EntriesTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace)
        cls.entry = entry_make(agent=cls.agent, memory_user=cls.ada, content="Ada moved to Lisbon in May.")
        cls.others = [
            entry_make(agent=cls.agent, memory_user=cls.ada, content=f"Ada likes topic {n}.")
            for n in range(4)
        ]
        globex_user = memory_user_make(cls.other_workspace, canonical_id="telegram:9")
        cls.foreign = entry_make(
            agent=cls.outsider_agent, memory_user=globex_user, content="Globex secret note"
        )

    def test_full_page_and_fragments_in_bounded_queries(self):
        url = self.url("memories:entries")
        self.open_as(self.viewer, url)
        # One more for the Review tab's count (browser.selectors.review).
        with self.assertNumQueries(7):
            response = self.client.get(url)
        assert b'data-total="5"' in response.content and b"Globex secret" not in response.content
        for n in range(10):
            entry_make(agent=self.other_agent, memory_user=self.ada, content=f"More {n}.")
        with self.assertNumQueries(6):
            fragment = self.htmx("get", url, target="results")
        assert b"<html" not in fragment.content and b'data-total="15"' in fragment.content

    def test_search_and_status_filters(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:entries") + "?q=lisbon")
        assert b'data-total="1"' in response.content
        response = self.client.get(self.url("memories:entries") + "?status=rejected")
        assert b'data-total="0"' in response.content

    def test_detail_shows_evidence(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:entry", pk=self.entry.pk))
        assert b"Evidence" in response.content and b"Ada moved to Lisbon in May." in response.content

    def test_editor_edits_content_and_status_inline(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:entry-edit", pk=self.entry.pk),
            {"content": "Ada moved to Porto in June.", "status": "superseded"},
            target=f"row-{self.entry.pk}",
        )
        assert "Saved episodic entry" in response["HX-Trigger"]
        entry = EpisodicEntry.objects.get(pk=self.entry.pk)
        assert (entry.content, entry.status) == ("Ada moved to Porto in June.", "superseded")

    def test_empty_content_is_an_error_in_the_row(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:entry-edit", pk=self.entry.pk),
            {"content": "   ", "status": "active"},
            target=f"row-{self.entry.pk}",
        )
        assert b'class="editing"' in response.content
        assert EpisodicEntry.objects.get(pk=self.entry.pk).content == "Ada moved to Lisbon in May."

    def test_viewer_cannot_edit_or_delete(self):
        self.login(self.viewer)
        response = self.client.post(
            self.url("memories:entry-edit", pk=self.entry.pk), {"content": "x", "status": "active"}
        )
        assert response.status_code == 403
        assert (
            self.client.post(self.url("memories:entries-delete"), {"ids": [self.entry.pk]}).status_code == 403
        )

    def test_batch_delete_never_touches_another_workspace(self):
        self.login(self.teammate)
        ids = [e.pk for e in self.others[:3]]
        response = self.htmx("post", self.url("memories:entries-delete"), {"ids": ids}, target="results")
        assert "Deleted 3 episodic entries." in response["HX-Trigger"]
        response = self.htmx(
            "post", self.url("memories:entries-delete"), {"ids": [self.foreign.pk]}, target="results"
        )
        assert EpisodicEntry.objects.filter(pk=self.foreign.pk).exists()
        # As for an id that never existed: nothing is left to delete (test_batch_delete_rule).
        assert "nothing was deleted" in response["HX-Trigger"]

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:entries")).status_code == 404
        own = self.url("memories:entry", pk=self.entry.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(own).status_code == 404
