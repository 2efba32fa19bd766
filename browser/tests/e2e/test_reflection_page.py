"""End to end: the Reflection page shows runs with a progress bar that follows a running run
(htmx polling), the cached profiles and the LLM budget's usage; it holds at both widths."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.lib.llm_budget import budget_day, budget_reset_at
from core.models import LLMBudget, LLMUsage, Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from identities.services import memory_user_create
from reflection.models import ReflectionProfile, ReflectionRun

pytestmark = pytest.mark.browser


class ReflectionPageTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        # An editor: the admin's top bar (Audit, Members, API keys, Webhooks) is wider than a
        # phone since the Audit link came, a problem of the top bar that this page does not add to.
        operator_create(
            workspace=self.workspace, username="editor", password=PASSWORD, role=Membership.Role.EDITOR
        )
        self.agent = agent_get_or_create(workspace=self.workspace, slug="support-bot")
        self.idle_agent = agent_get_or_create(workspace=self.workspace, slug="sales-bot")
        ada = memory_user_create(
            workspace=self.workspace, canonical_id="telegram:1", display_name="Ada Lovelace"
        )
        now = timezone.now()
        ReflectionRun.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            state="done",
            method="llm",
            trigger="schedule",
            started_at=now - timedelta(hours=25),
            finished_at=now - timedelta(hours=24),
            progress_done=40,
            progress_total=40,
            merged=7,
            retired=3,
            profiles_refreshed=40,
            tokens_used=18_240,
        )
        self.running = ReflectionRun.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            state="running",
            method="llm",
            trigger="api",
            started_at=now - timedelta(minutes=2),
            progress_done=12,
            progress_total=40,
            merged=2,
            retired=1,
            profiles_refreshed=12,
            tokens_used=4_180,
        )
        ReflectionRun.objects.create(
            workspace=self.workspace,
            agent=agent_get_or_create(workspace=self.workspace, slug="billing-assistant-with-a-long-name"),
            state="waiting",
            resume_after=budget_reset_at(budget_day()),
            progress_done=3,
            progress_total=9,
        )
        ReflectionProfile.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=ada,
            text="- name: Ada Lovelace\n- lives in Porto (moved from Lisbon in May)\n- prefers tea; "
            "answers best in the morning\n- works on the analytical engine",
            method="llm",
            facts_used=3,
            entries_used=4,
        )
        LLMBudget.objects.create(workspace=self.workspace, daily_tokens=50_000, policy="wait")
        for day, purpose, total in (
            (budget_day(), "reflection", 22_420),
            (budget_day(), "extraction", 9_310),
            (budget_day() - timedelta(days=1), "compaction", 3_050),
        ):
            LLMUsage.objects.create(
                workspace=self.workspace, day=day, purpose=purpose, calls=12, total_tokens=total, refused=0
            )
        self.url = f"{self.live_server_url}/memories/{self.workspace.pk}/reflection/"

    @screenshot_on_failure
    def test_runs_progress_profiles_and_budget_at_both_widths(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/reflection/")
        expect(page.get_by_role("heading", name="Reflection", level=1)).to_be_visible()
        tabs = page.get_by_role("navigation", name="Memory types")
        expect(tabs.get_by_role("link", name="Reflection")).to_have_attribute("aria-current", "page")
        row = page.locator(f"#run-{self.running.pk}")
        expect(row.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "12")
        expect(row).to_contain_text("12 / 40 people")
        expect(page.locator("#reflection-runs")).to_have_attribute("hx-trigger", "every 2s")
        expect(page.get_by_text("31,730 of 50,000 tokens")).to_be_visible()
        expect(page.locator(".profile-text")).to_contain_text("lives in Porto")
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(self.url)
            page.wait_for_load_state("networkidle")
            assert_layout_sound(page, f"reflection-{width}")
        page.set_viewport_size({"width": 1280, "height": 860})

        # The run advances and ends in the background: the polled panel follows, then stops polling.
        ReflectionRun.objects.filter(pk=self.running.pk).update(progress_done=30)
        expect(row.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "30")
        ReflectionRun.objects.filter(pk=self.running.pk).update(
            progress_done=40, state="done", finished_at=timezone.now()
        )
        ReflectionRun.objects.filter(state="waiting").update(state="done")
        expect(row).to_contain_text("Done")
        expect(page.locator("#reflection-runs")).not_to_have_attribute("hx-trigger", "every 2s")

        # An operator starts a run for an agent with nothing to reflect on: it is done at once.
        page.get_by_label("Agent").select_option("sales-bot")
        page.get_by_role("button", name="Start reflection").click()
        expect(page.locator("#reflection-runs tbody tr").first).to_contain_text("sales-bot")
        assert ReflectionRun.objects.get(agent=self.idle_agent).state == "done"
