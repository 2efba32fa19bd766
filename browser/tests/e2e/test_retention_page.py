"""End to end: an admin sets a retention rule and places a legal hold on the Retention page;
the page passes the screenshot check at desktop and phone widths."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from identities.services import memory_user_create
from retention.models import RetentionRule, RetentionRun

pytestmark = pytest.mark.browser


class RetentionPageBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="support-assistant-with-a-long-slug")
        operator_create(
            workspace=self.workspace, username="admin", password=PASSWORD, role=Membership.Role.ADMIN
        )
        self.ada = memory_user_create(
            workspace=self.workspace, canonical_id="telegram:1001", display_name="Ada"
        )
        old = [EpisodeFactory(agent=self.agent, memory_user=self.ada) for _ in range(3)]
        Episode.objects.filter(pk__in=[e.pk for e in old]).update(
            created_at=timezone.now() - timedelta(days=90)
        )
        RetentionRule.objects.create(
            workspace=self.workspace, agent=self.agent, tier="facts", keep_latest=500
        )
        RetentionRun.objects.create(
            workspace=self.workspace,
            state="done",
            finished_at=timezone.now(),
            deleted={"messages": 1234, "checkpoints": 56},
        )
        self.base = f"/memories/{self.workspace.pk}/retention/"

    @screenshot_on_failure
    def test_an_admin_sets_a_rule_and_places_a_hold(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=self.base)
        expect(page.locator(".retention-next")).to_have_text("The next run deletes nothing.")
        page.get_by_label("Tier").select_option("episodes")
        page.get_by_label("Older than (days)").fill("30")
        page.get_by_role("button", name="Save rule").click()
        expect(page.locator(".retention-next")).to_contain_text("The next run deletes 3 episodes.")
        page.get_by_label("Person").fill("telegram:1001")
        page.get_by_label("Reason").fill("Case 2026-114: preserve")
        page.get_by_role("button", name="Place hold").click()
        expect(page.locator("#legal-holds")).to_contain_text("Case 2026-114: preserve")
        # The held person's episodes are out of the next run.
        expect(page.locator(".retention-next")).to_have_text("The next run deletes nothing.")
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            page.reload()
            page.wait_for_load_state("networkidle")
            assert_layout_sound(page, f"retention-{width}")
