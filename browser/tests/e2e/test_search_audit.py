"""End to end (issue 15): the header search used with the keyboard only, its results page, and
the audit trail page, each passing the screenshot check at desktop and phone widths."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from episodes.services import episode_create
from episodic.models import EpisodicEntry
from episodic.services import entry_content_hash, entry_normalize, entry_update
from facts.services import fact_remember, fact_update
from identities.services import memory_user_identify, memory_user_update
from procedures.services import procedure_create
from threads.services import thread_append_messages, thread_create

pytestmark = pytest.mark.browser


class SearchAndAuditTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        other = workspace_create(name="Globex")
        agent = agent_get_or_create(workspace=self.workspace, slug="concierge")
        operator_create(
            workspace=self.workspace, username="editor", password=PASSWORD, role=Membership.Role.EDITOR
        )
        self.ada = memory_user_identify(
            workspace=self.workspace, channel="telegram", external_id="1001", profile={"name": "Ada Lovelace"}
        ).memory_user
        memory_user_update(memory_user=self.ada, actor="operator:editor", display_name="Ada King, Lisbon")
        fact = fact_remember(
            workspace=self.workspace,
            key="home_city",
            value="Lisbon",
            scope="user",
            memory_user=self.ada,
            actor="api_key:mk_concierge",
        ).fact
        fact_update(fact=fact, actor="operator:editor", value="Lisbon, Alfama district")
        fact_remember(
            workspace=self.workspace,
            key="a_rather_long_fact_key_about_lisbon_trips_without_spaces",
            value={"trips": ["Lisbon", "Porto"], "note": "A value long enough to wrap on a phone. " * 3},
            scope="global",
            actor="system",
        )
        content = entry_normalize("Ada moved to Lisbon in May and prefers trains to planes.")
        self.entry = EpisodicEntry.objects.create(
            workspace=self.workspace,
            agent=agent,
            memory_user=self.ada,
            content=content,
            content_hash=entry_content_hash(content),
            source=EpisodicEntry.Source.USER_ASSERTION,
            evidence=content,
        )
        entry_update(entry=self.entry, actor="operator:editor", status="superseded")
        entry_update(entry=self.entry, actor="operator:editor", status="active")
        episode_create(
            workspace=self.workspace,
            agent=agent,
            memory_user=self.ada,
            trigger_type="chat",
            error="Lisbon API timeout",
        )
        procedure_create(
            workspace=self.workspace,
            agent=agent,
            name="Book a hotel in Lisbon",
            procedure_type="prompt_template",
            content="Ask for the dates first.",
            actor="operator:editor",
        )
        thread = thread_create(
            workspace=self.workspace, agent=agent, memory_user=self.ada, title="Trip planning"
        )
        thread_append_messages(
            thread=thread,
            messages=[
                {"role": "user", "content": "I land in Lisbon on Friday evening."},
                {"role": "assistant", "content": "Shall I book the hotel near the river?"},
            ],
        )
        fact_remember(workspace=other, key="globex_lisbon", value="Lisbon secret", scope="global")
        self.base = f"{self.live_server_url}/memories/{self.workspace.pk}"

    @screenshot_on_failure
    def test_search_by_keyboard_only(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        page.locator("body").press("/")
        box = page.get_by_role("combobox", name=re.compile("Search facts, entries"))
        expect(box).to_be_focused()
        expect(box).to_have_attribute("aria-expanded", "false")
        box.press_sequentially("lisbon", delay=30)
        listbox = page.get_by_role("listbox", name="Search results")
        expect(box).to_have_attribute("aria-expanded", "true")
        expect(listbox.get_by_role("group")).to_have_count(6)
        expect(listbox).not_to_contain_text("secret")
        options = listbox.get_by_role("option")
        first = options.first
        box.press("ArrowDown")
        expect(first).to_have_attribute("aria-selected", "true")
        expect(box).to_have_attribute("aria-activedescendant", first.get_attribute("id"))
        box.press("ArrowUp")  # wraps to the last: "All results"
        expect(options.last).to_have_attribute("aria-selected", "true")
        expect(first).to_have_attribute("aria-selected", "false")
        # Escape closes the list without leaving the box; the arrow opens it again.
        box.press("Escape")
        expect(box).to_have_attribute("aria-expanded", "false")
        expect(listbox).to_be_hidden()
        expect(box).to_be_focused()
        box.press("ArrowDown")
        expect(box).to_have_attribute("aria-expanded", "true")
        entry_option = listbox.get_by_role("group", name="Episodic entries").get_by_role("option").first
        while entry_option.get_attribute("aria-selected") != "true":
            box.press("ArrowDown")
        box.press("Enter")
        expect(page).to_have_url(re.compile(rf"/entries/{self.entry.pk}/$"))
        expect(page.get_by_role("heading", name=re.compile("Episodic entry"))).to_be_visible()
        # Enter with no result chosen opens the results page, grouped by tier.
        page.keyboard.press("/")
        expect(box).to_be_focused()
        box.fill("lisbon")
        expect(box).to_have_attribute("aria-expanded", "true")
        box.press("Enter")
        expect(page).to_have_url(re.compile(r"/search/\?q=lisbon$"))
        groups = (
            "Facts",
            "Episodic entries",
            "Entries close in meaning",
            "Episodes",
            "Procedures",
            "People",
            "Messages",
            "Messages close in meaning",
        )
        for name in groups:
            # The heading is the group's name and its count ("Messages 1").
            heading = page.get_by_role("heading", name=re.compile(rf"^{name} \d+\+?$"), level=2)
            expect(heading).to_be_visible()
        expect(page.locator("main")).not_to_contain_text("secret")
        # The results are links reached with Tab; Enter opens one.
        procedure_link = page.get_by_role("link", name="Book a hotel in Lisbon")
        for _ in range(60):
            page.keyboard.press("Tab")
            if procedure_link.evaluate("el => el === document.activeElement"):
                break
        expect(procedure_link).to_be_focused()
        page.keyboard.press("Enter")
        expect(page).to_have_url(re.compile(r"/procedures/[0-9a-f-]+/$"))

    @screenshot_on_failure
    def test_search_and_audit_pages_pass_the_screenshot_check_at_both_widths(self):
        page = self.page
        self.log_in("editor", PASSWORD)
        pages = {
            "search": f"{self.base}/search/?q=lisbon",
            "search-empty": f"{self.base}/search/",
            "search-messages": f"{self.base}/search/?q=lisbon&tier=messages",
            "audit": f"{self.base}/audit/",
            "audit-person": f"{self.base}/audit/?memory_user={self.ada.pk}",
        }
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            for name, url in pages.items():
                page.goto(url)
                page.wait_for_load_state("networkidle")
                assert_layout_sound(page, f"{name}-{width}")

    @screenshot_on_failure
    def test_audit_page_filters_by_person_and_offers_the_csv(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/audit/")
        expect(page.get_by_role("heading", name="Audit trail")).to_be_visible()
        table = page.locator("table.audit-table")
        expect(table).to_contain_text("Lisbon, Alfama district")
        expect(table).to_contain_text("mk_concierge")
        page.get_by_text("Filters", exact=True).click()
        person = page.get_by_role("combobox", name="Person")
        person.press_sequentially("ada", delay=30)
        listbox = page.get_by_role("listbox", name="Matching memory users")
        expect(listbox.get_by_role("option")).to_have_count(1)
        person.press("ArrowDown")
        person.press("Enter")
        expect(page).to_have_url(re.compile(rf"memory_user={self.ada.pk}"))
        expect(table).not_to_contain_text("a_rather_long_fact_key")
        expect(table).to_contain_text("home_city")
        link = page.get_by_role("link", name="Download CSV")
        expect(link).to_have_attribute("href", re.compile(rf"/audit/export\.csv\?memory_user={self.ada.pk}"))
        with page.expect_download() as download:
            link.click()
        text = Path(download.value.path()).read_text(encoding="utf-8")
        assert text.startswith("at,actor,action,tier,entity_type,entity_id,before,after,changes")
        assert "home_city" in text and "a_rather_long_fact_key" not in text
