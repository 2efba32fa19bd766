"""The entries tab's New entry form: one entry stored directly, through `entry_create`."""

from browser.tests.base import BrowserTestCase
from browser.tests.factories import entry_make, memory_user_make
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import EVIDENCE_REQUIRED
from episodic.tests.factories import use_test_embeddings


class EntryCreatePageTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace)
        cls.foreign = memory_user_make(cls.other_workspace, canonical_id="telegram:9", display_name="Zed")

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)

    def form(self, **overrides):
        return {
            "agent": "assistant",
            "memory_user": str(self.ada.pk),
            "content": "Ada starts a pottery class on Tuesday.",
            "evidence": "",
            "source": "agent_direct",
            **overrides,
        }

    def test_the_form_lists_the_workspaces_people_and_agents(self):
        self.login(self.teammate)
        response = self.client.get(self.url("memories:entry-create") + f"?memory_user={self.ada.pk}")
        assert response.status_code == 200
        body = response.content.decode()
        assert f'<option value="{self.ada.pk}" selected>' in body
        assert "Zed" not in body and 'value="assistant"' in body and 'value="researcher"' in body

    def test_the_list_links_to_the_form_for_editors_only(self):
        self.login(self.teammate)
        new = self.url("memories:entry-create").encode()
        assert new in self.client.get(self.url("memories:entries")).content
        self.login(self.viewer)
        assert new not in self.client.get(self.url("memories:entries")).content

    def test_an_editor_stores_an_entry_without_evidence(self):
        self.login(self.teammate)
        response = self.htmx("post", self.url("memories:entry-create"), self.form())
        assert response.status_code == 200
        entry = EpisodicEntry.objects.get()
        assert (entry.agent, entry.memory_user, entry.source) == (self.agent, self.ada, "agent_direct")
        assert entry.embedding_model and entry.metadata == {"origin": "direct"}
        assert "Stored the episodic entry" in response["HX-Trigger"]
        assert response["HX-Push-Url"].endswith(f"/entries/{entry.pk}/")
        assert (
            b"Ada starts a pottery class on Tuesday." in response.content and b"<html" not in response.content
        )

    def test_without_javascript_it_redirects_to_the_entry(self):
        self.login(self.owner)
        response = self.client.post(self.url("memories:entry-create"), self.form())
        entry = EpisodicEntry.objects.get()
        assert response.status_code == 302 and response["Location"].endswith(f"/entries/{entry.pk}/")

    def test_a_duplicate_is_not_stored_and_shows_the_stored_entry(self):
        stored = entry_make(
            agent=self.agent, memory_user=self.ada, content="Ada starts a pottery class on Tuesday."
        )
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:entry-create"),
            self.form(content="ada starts a POTTERY class on tuesday."),
        )
        assert EpisodicEntry.objects.count() == 1
        assert "already exists" in response["HX-Trigger"]
        assert response["HX-Push-Url"].endswith(f"/entries/{stored.pk}/")

    def test_errors_re_render_the_form(self):
        self.login(self.teammate)
        response = self.htmx("post", self.url("memories:entry-create"), self.form(source="user_assertion"))
        assert response.status_code == 200
        assert EVIDENCE_REQUIRED in response.content.decode()
        response = self.htmx("post", self.url("memories:entry-create"), self.form(content="   "))
        assert b"This field is required" in response.content
        assert not EpisodicEntry.objects.exists()

    def test_a_viewer_is_refused(self):
        self.login(self.viewer)
        assert self.client.get(self.url("memories:entry-create")).status_code == 403
        assert self.client.post(self.url("memories:entry-create"), self.form()).status_code == 403
        assert not EpisodicEntry.objects.exists()

    def test_an_outsider_cannot_reach_the_workspace_or_name_its_people(self):
        self.login(self.outsider)
        assert self.client.post(self.url("memories:entry-create"), self.form()).status_code == 404
        # From their own workspace, a person of another one is not a choice.
        self.login(self.teammate)
        response = self.htmx(
            "post", self.url("memories:entry-create"), self.form(memory_user=str(self.foreign.pk))
        )
        assert b"Select a valid choice" in response.content
        assert not EpisodicEntry.objects.exists()
