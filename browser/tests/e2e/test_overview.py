"""End to end: the overview as a workspace's landing page, its charts and their data tables,
and the screenshot check at desktop and phone widths with a month of realistic activity."""

import datetime as dt
import random
import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from activity.models import DailyCounter
from activity.services import activity_aggregate
from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.counters import ENTRIES_REJECTED, RECALLS_CONTEXT, RECALLS_RECALL, RECALLS_SEARCH
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from facts.services import fact_remember
from identities.services import memory_user_create
from threads.models import Message
from threads.services import thread_append_messages, thread_create

pytestmark = pytest.mark.browser


class OverviewBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        rng = random.Random(7)
        self.workspace = workspace_create(name="Acme")
        operator_create(
            workspace=self.workspace, username="viewer", password=PASSWORD, role=Membership.Role.VIEWER
        )
        today = timezone.now().astimezone(dt.UTC).date()
        agents = [
            agent_get_or_create(workspace=self.workspace, slug=s) for s in ("support-bot", "sales-assistant")
        ]
        people = [
            memory_user_create(
                workspace=self.workspace, canonical_id=f"telegram:{i}", display_name=f"Person {i}"
            )
            for i in range(3)
        ]
        for n, agent in enumerate(agents):
            thread = thread_create(workspace=self.workspace, agent=agent, memory_user=people[n])
            stored = thread_append_messages(
                thread=thread, messages=[{"role": "user", "content": f"turn {i}"} for i in range(60)]
            )
            # Spread the messages over the last month.
            for message in stored:
                day = today - dt.timedelta(days=rng.randint(0, 29))
                Message.objects.filter(pk=message.pk).update(
                    created_at=dt.datetime.combine(day, dt.time(10), tzinfo=dt.UTC)
                )
        for i in range(12):
            fact_remember(workspace=self.workspace, key=f"fact_{i % 8}", value=f"v{i % 3}", scope="global")
        counters = []
        for back in range(30):
            day = today - dt.timedelta(days=back)
            for metric, top in (
                (RECALLS_CONTEXT, 40),
                (RECALLS_RECALL, 15),
                (RECALLS_SEARCH, 8),
                (ENTRIES_REJECTED + "duplicate_similar", 5),
                (ENTRIES_REJECTED + "evidence_not_in_transcript", 3),
            ):
                counters.append(
                    DailyCounter(
                        workspace=self.workspace,
                        agent=agents[back % 2],
                        day=day,
                        metric=metric,
                        value=rng.randint(0, top),
                    )
                )
        DailyCounter.objects.bulk_create(counters)
        activity_aggregate(first=today - dt.timedelta(days=89), last=today)
        self.base = f"/memories/{self.workspace.pk}"

    @screenshot_on_failure
    def test_lands_on_the_overview_and_passes_the_screenshot_check_at_both_widths(self):
        page = self.page
        self.log_in("viewer", PASSWORD)
        expect(page).to_have_url(re.compile(rf"{self.base}/overview/$"))
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        expect(page.get_by_role("img", name=re.compile("^Recalls served"))).to_be_visible()
        # The numbers behind a chart open as a table.
        figure = page.locator("#chart-recalls")
        figure.get_by_text("Data").click()
        expect(figure.locator("table tbody tr")).to_have_count(30)
        # Ranges are links (htmx swaps the page, the URL follows).
        page.get_by_role("link", name="7 days").click()
        expect(page).to_have_url(re.compile(r"days=7"))
        expect(figure.locator("table tbody tr")).to_have_count(7)
        page.get_by_role("link", name="30 days").click()
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(f"{self.live_server_url}{self.base}/overview/")
            page.wait_for_load_state("networkidle")
            page.locator("#chart-entries").get_by_text("Data").click()
            assert_layout_sound(page, f"overview-{width}")
