"""End to end: an episode's record and a checkpoint's metadata edited in place on their detail
pages, and a large checkpoint state opened whole with "Show all" (issue 13 item 10)."""

import json

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_put
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from episodes.models import Episode
from episodes.services import episode_create
from threads.services import thread_create

pytestmark = pytest.mark.browser


class CurationTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        operator_create(
            workspace=self.workspace, username="editor", password=PASSWORD, role=Membership.Role.EDITOR
        )
        self.episode = episode_create(
            workspace=self.workspace, agent=agent, trigger_type="chat", outcome="failure", error="Timeout"
        )
        thread = thread_create(workspace=self.workspace, agent=agent, title="Approval flow")
        self.checkpoint, _ = checkpoint_put(
            thread=thread,
            checkpoint_id="cp-1",
            type="json",
            data=json.dumps({"items": [f"item-{n:04d}" for n in range(400)]}).encode(),
            metadata={"source": "loop"},
        )

    def path(self, *parts):
        return "/".join([f"/memories/{self.workspace.pk}", *map(str, parts)]) + "/"

    @screenshot_on_failure
    def test_episode_record_edited_in_place_and_cancel_restores_it(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=self.path("episodes", self.episode.pk))
        card = page.locator("#episode-record")
        card.get_by_role("link", name="Edit record").click()
        form = page.get_by_role("form", name="Edit episode")
        form.get_by_role("link", name="Cancel").click()
        expect(page.locator("#episode-record").get_by_role("link", name="Edit record")).to_be_visible()
        expect(page.locator("#episode-record form")).to_have_count(0)
        page.locator("#episode-record").get_by_role("link", name="Edit record").click()
        form = page.get_by_role("form", name="Edit episode")
        form.get_by_label("Final output (JSON)").fill("{not json")
        form.get_by_role("button", name="Save").click()
        expect(page.get_by_role("form", name="Edit episode")).to_contain_text("This is not valid JSON.")
        form = page.get_by_role("form", name="Edit episode")
        form.get_by_label("Final output (JSON)").fill('{"answer": "<b>resent</b>"}')
        form.get_by_label("Outcome").select_option("success")
        form.get_by_role("button", name="Save").click()
        expect(page.locator("#toasts")).to_contain_text("Saved episode.")
        expect(page.locator("#episode-record")).to_contain_text("<b>resent</b>")
        assert page.url.endswith(self.path("episodes", self.episode.pk))
        episode = Episode.objects.get(pk=self.episode.pk)
        assert episode.outcome == "success" and episode.final_output == {"answer": "<b>resent</b>"}

    @screenshot_on_failure
    @override_settings(CHECKPOINTS_BROWSER_PREVIEW_CHARS=300)
    def test_checkpoint_metadata_edited_and_state_shown_whole(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=self.path("checkpoints", self.checkpoint.pk))
        state = page.locator("#checkpoint-state")
        expect(state).to_contain_text("item-0000")
        expect(state).not_to_contain_text("item-0399")
        state.get_by_role("link", name="Show all").click()
        expect(page.locator("#checkpoint-state")).to_contain_text("item-0399")
        page.locator("#checkpoint-metadata").get_by_role("link", name="Edit metadata").click()
        form = page.get_by_role("form", name="Edit metadata")
        form.get_by_label("Metadata (JSON object)").fill('{"source": "update"}')
        form.get_by_role("button", name="Save").click()
        expect(page.locator("#toasts")).to_contain_text("Saved metadata.")
        expect(page.locator("#checkpoint-metadata")).to_contain_text('"source": "update"')
        assert Checkpoint.objects.get(pk=self.checkpoint.pk).metadata == {"source": "update"}
