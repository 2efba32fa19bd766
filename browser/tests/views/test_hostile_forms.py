"""Hostile input on the /memories forms: each answers with the form's error (or the queue and
a toast), never a 500, and stores nothing."""

from django.utils import timezone

from browser.tests.base import BrowserTestCase
from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_put
from core.parsers import JSON_NUMBER_RANGE
from core.testing_openai import OpenAITestServer
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from procedures.models import Procedure
from procedures.tests.factories import ProcedureFactory
from threads.tests.factories import make_thread

# json.loads reads a number past the float range as infinity, which jsonb refuses.
TOO_LARGE = "1e999"


class JSONNumbersTooLargeTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        person = MemoryUserFactory(workspace=cls.workspace)
        cls.procedure = ProcedureFactory(workspace=cls.workspace, agent=cls.agent, content="Do the thing.")
        cls.episode = EpisodeFactory(
            agent=cls.agent, memory_user=person, ended_at=timezone.now(), outcome="success"
        )
        thread = make_thread(workspace=cls.workspace, agent=cls.agent)
        cls.checkpoint = checkpoint_put(
            thread=thread, checkpoint_id="cp-1", type="json", data=b"{}", metadata={"step": 1}
        )[0]
        cls.fact = fact_remember(workspace=cls.workspace, key="limit", value=3, scope="global").fact

    def assert_refused(self, response):
        assert response.status_code in (200, 400), response.status_code
        assert JSON_NUMBER_RANGE in response.content.decode()

    def test_procedure_content_and_conditions(self):
        self.login(self.teammate)
        url = self.url("memories:procedure-edit", pk=self.procedure.pk)
        base = {"name": "n", "procedure_type": "prompt_template", "content": "c"}
        for data in (
            {**base, "content": f'{{"steps": {TOO_LARGE}}}', "content_is_json": "on"},
            {**base, "trigger_conditions": f'{{"min": {TOO_LARGE}}}'},
        ):
            self.assert_refused(self.htmx("post", url, data, target=f"row-{self.procedure.pk}"))
            self.assert_refused(self.client.post(url, data))
        procedure = Procedure.objects.get(pk=self.procedure.pk)
        assert (procedure.name, procedure.content) == (self.procedure.name, "Do the thing.")

    def test_episode_record_input_and_output(self):
        self.login(self.teammate)
        url = self.url("memories:episode-record-edit", pk=self.episode.pk)
        for name in ("input", "final_output"):
            data = {"outcome": "success", "trigger_type": "changed", name: f"[{TOO_LARGE}]"}
            self.assert_refused(self.htmx("post", url, data, target="episode-record"))
            self.assert_refused(self.client.post(url, data))
        episode = Episode.objects.get(pk=self.episode.pk)
        assert episode.trigger_type == "chat" and episode.input == self.episode.input

    def test_checkpoint_metadata(self):
        self.login(self.owner)
        url = self.url("memories:checkpoint-edit", pk=self.checkpoint.pk)
        data = {"metadata": f'{{"step": {TOO_LARGE}}}'}
        self.assert_refused(self.htmx("post", url, data, target="checkpoint-metadata"))
        self.assert_refused(self.client.post(url, data))
        assert Checkpoint.objects.get(pk=self.checkpoint.pk).metadata == {"step": 1}

    def test_fact_value(self):
        self.login(self.owner)
        url = self.url("memories:fact-edit", pk=self.fact.pk)
        data = {"value": TOO_LARGE, "value_is_json": "on", "fact_type": "fact", "confidence": "0.5"}
        response = self.htmx("post", url, data, target=f"row-{self.fact.pk}")
        assert response.status_code == 200 and 'class="editing"' in response.content.decode()
        assert Fact.objects.get(workspace=self.workspace, key="limit", valid_to__isnull=True).value == 3

    def test_an_outsider_still_gets_404_and_a_viewer_403(self):
        url = self.url("memories:checkpoint-edit", pk=self.checkpoint.pk)
        self.login(self.outsider)
        assert self.client.post(url, {"metadata": "{}"}).status_code == 404
        self.login(self.viewer)
        assert self.client.post(url, {"metadata": "{}"}).status_code == 403


class CardSavedOutsideItsCardTests(BrowserTestCase):
    def test_an_htmx_save_of_the_edit_page_redirects_with_hx_redirect(self):
        """The edit page (no card to swap, e.g. opened into #main) saved by htmx: the detail
        page is loaded whole, instead of a 500 from a toast with no response."""
        person = MemoryUserFactory(workspace=self.workspace)
        episode = EpisodeFactory(
            agent=self.agent, memory_user=person, ended_at=timezone.now(), outcome="success"
        )
        self.login(self.teammate)
        url = self.url("memories:episode-record-edit", pk=episode.pk)
        data = {"outcome": "failure", "trigger_type": "cron", "error": "timeout"}
        response = self.htmx("post", url, data, target="main")
        assert response.status_code == 200
        assert response["HX-Redirect"] == self.url("memories:episode", pk=episode.pk)
        assert Episode.objects.get(pk=episode.pk).trigger_type == "cron"
        page = self.client.get(response["HX-Redirect"])
        assert "Saved episode." in page.content.decode()


class ReviewMergeIntoMalformedIdTests(BrowserTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        person = memory_user_factory(self.workspace)
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        self.held = entry_create(
            agent=self.agent, memory_user=person, content="Ada is learning Portuguese.", actor="t"
        ).entry

    def test_merge_into_a_malformed_id_is_reported_and_nothing_is_decided(self):
        self.login(self.teammate)
        decide = self.url("memories:review-decide")
        for into in ("abc", "\x00", "1" * 300):
            data = {"items": f"entry:{self.held.pk}", "action": "merge", "into": into}
            response = self.htmx("post", decide, data, target="review-results")
            assert response.status_code == 200, into
            assert "Merged 0; not done:" in response.headers["HX-Trigger"]
            # Nothing decided: a plain post gets the refusal's status (400 or 404), not a redirect.
            assert self.client.post(decide, data).status_code in (400, 404), into
        assert EpisodicEntry.objects.get(pk=self.held.pk).review == "held"

    def test_the_edit_link_repeats_its_hx_get_in_its_href(self):
        page = self.open_as(self.teammate, self.url("memories:review") + "?tier=entry")
        html = page.content.decode()
        edit_url = self.url("memories:review-edit", tier="entry", pk=self.held.pk)
        assert f'href="{edit_url}?tier=entry" hx-get="{edit_url}?tier=entry"' in html


class LegalHoldReleaseMalformedTests(BrowserTestCase):
    """The person page's and the Retention tab's release take `placed_on`: a malformed one is
    a 400 with the form's error (for htmx a 200, the error in place of the holds: htmx 2 swaps
    no 4xx) and releases nothing."""

    def test_malformed_placed_on_releases_nothing(self):
        from identities.models import MemoryUser
        from identities.services import memory_user_hold_place

        person = MemoryUserFactory(workspace=self.workspace)
        memory_user_hold_place(memory_user=person, reason="Case 9", actor="operator:owner")
        self.login(self.owner)
        urls = (
            self.url("memories:user-hold-release", pk=person.pk),
            self.url("memories:legal-hold-release", memory_user_id=person.pk),
        )
        for url in urls:
            for value in ("x", "\x00", f"{person.pk}\x00", "1" * 10_000, "{}"):
                response = self.htmx("post", url, {"placed_on": value})
                assert response.status_code == 200
                assert 'data-refusal="invalid"' in response.content.decode()
        assert MemoryUser.objects.get(pk=person.pk).legal_hold_reason == "Case 9"
