from browser.tests.base import BrowserTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from identities.tests.factories import MemoryUserFactory


class EpisodesTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.failed = EpisodeFactory(
            agent=cls.agent,
            memory_user=cls.person,
            outcome="failure",
            error="Timeout calling the CRM",
            messages=[{"role": "user", "content": "Where is my order?"}],
        )
        cls.others = [EpisodeFactory(agent=cls.other_agent, outcome="success") for _ in range(4)]
        cls.foreign = EpisodeFactory(agent=cls.outsider_agent, trigger_type="globex-only")

    def test_full_page_and_fragments_in_bounded_queries(self):
        url = self.url("memories:episodes")
        self.open_as(self.viewer, url)
        # One more for the Review tab's count (browser.selectors.review).
        with self.assertNumQueries(7):
            response = self.client.get(url)
        assert b'data-total="5"' in response.content and b"globex-only" not in response.content
        for _ in range(10):
            EpisodeFactory(agent=self.agent, memory_user=self.person)
        with self.assertNumQueries(6):
            fragment = self.htmx("get", url, target="results")
        assert b"<html" not in fragment.content

    def test_filters_from_the_api(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:episodes") + "?outcome=failure")
        assert b'data-total="1"' in response.content
        response = self.client.get(self.url("memories:episodes") + f"?memory_user={self.person.pk}&q=crm")
        assert b'data-total="1"' in response.content

    def test_detail_shows_the_run(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:episode", pk=self.failed.pk))
        assert b"Where is my order?" in response.content
        assert b"Timeout calling the CRM" in response.content

    def test_editor_gives_feedback_inline(self):
        self.login(self.teammate)
        edit = self.htmx(
            "get", self.url("memories:episode-edit", pk=self.failed.pk), target=f"row-{self.failed.pk}"
        )
        assert b"Rating" in edit.content
        response = self.htmx(
            "post",
            self.url("memories:episode-edit", pk=self.failed.pk),
            {"rating": "2", "comment": "Should have retried"},
            target=f"row-{self.failed.pk}",
        )
        assert "Saved episode" in response["HX-Trigger"]
        assert b"2/5" in response.content
        episode = Episode.objects.get(pk=self.failed.pk)
        assert (episode.rating, episode.feedback_comment) == (2, "Should have retried")

    def test_invalid_rating_is_an_error_in_the_row(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:episode-edit", pk=self.failed.pk),
            {"rating": "9"},
            target=f"row-{self.failed.pk}",
        )
        assert b'class="editing"' in response.content and b"Select a valid choice" in response.content

    def test_viewer_cannot_give_feedback_or_delete(self):
        self.login(self.viewer)
        assert b"Feedback</a>" not in self.client.get(self.url("memories:episodes")).content
        response = self.client.post(self.url("memories:episode-edit", pk=self.failed.pk), {"rating": "5"})
        assert response.status_code == 403
        assert (
            self.client.post(self.url("memories:episodes-delete"), {"ids": [self.failed.pk]}).status_code
            == 403
        )
        assert Episode.objects.get(pk=self.failed.pk).rating is None

    def test_batch_delete(self):
        self.login(self.teammate)
        ids = [e.pk for e in self.others[:3]]
        response = self.htmx("post", self.url("memories:episodes-delete"), {"ids": ids}, target="results")
        assert "Deleted 3 episodes." in response["HX-Trigger"]
        assert b'data-total="2"' in response.content

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:episodes")).status_code == 404
        own = self.url("memories:episode", pk=self.failed.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(own).status_code == 404
        delete = self.url("memories:episodes-delete").replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        response = self.client.post(delete, {"ids": [self.failed.pk], "confirmed": "on"})
        assert Episode.objects.filter(pk=self.failed.pk).exists()
        # In their own workspace the id is unknown: the refusal's 404, as for a random id.
        assert response.status_code == 404
        assert str(self.failed.pk) not in response.content.decode()

    def test_rating_and_comment_are_icons_with_text(self):
        """Issue 18: a star or emoji glyph is missing from common fonts; inline SVG icons are
        drawn anyway, and screen readers hear the rating and the comment as text."""
        Episode.objects.filter(pk=self.failed.pk).update(rating=4, feedback_comment="Too slow <b>")
        self.login(self.viewer)
        content = self.client.get(self.url("memories:episodes")).content.decode()
        assert "💬" not in content and "★" not in content
        assert '<span class="rating"><svg class="icon"' in content
        assert '<span class="visually-hidden">Rated 4 out of 5</span>' in content
        assert '<span class="visually-hidden">Comment: Too slow &lt;b&gt;</span>' in content
        assert 'title="Too slow &lt;b&gt;"' in content
        # Cells name their column for the stacked phone layout.
        assert '<td data-label="Rating" class="num">' in content
        detail = self.client.get(self.url("memories:episode", pk=self.failed.pk)).content.decode()
        assert "Rated 4 out of 5" in detail
