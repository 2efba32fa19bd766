"""End to end in headless Chromium against a live server: what an operator actually does."""

import re

import pytest
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from facts.models import Fact
from facts.services import fact_remember
from identities.services import memory_user_identify

pytestmark = pytest.mark.browser


class MemoriesBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        self.other = workspace_create(name="Globex")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        operator_create(
            workspace=self.workspace, username="editor", password=PASSWORD, role=Membership.Role.EDITOR
        )
        operator_create(
            workspace=self.workspace, username="viewer", password=PASSWORD, role=Membership.Role.VIEWER
        )
        admin = operator_create(
            workspace=self.workspace, username="admin", password=PASSWORD, role=Membership.Role.ADMIN
        )
        Membership.objects.create(workspace=self.other, user=admin.user, role=Membership.Role.ADMIN)
        self.person = memory_user_identify(
            workspace=self.workspace, channel="telegram", external_id="42", profile={"name": "Ada"}
        ).memory_user
        for n in range(10):
            fact_remember(workspace=self.workspace, key=f"note_{n:02d}", value=f"note {n}", scope="global")
        fact_remember(
            workspace=self.workspace,
            key="user_timezone",
            value="Europe/Paris",
            scope="user",
            memory_user=self.person,
            fact_type="user_preference",
        )
        fact_remember(
            workspace=self.workspace, key="agent_motto", value="be kind", scope="agent", agent=self.agent
        )
        fact_remember(workspace=self.other, key="globex_only", value="secret", scope="global")
        self.facts_url = f"{self.live_server_url}/memories/{self.workspace.pk}/facts/"

    def total(self):
        return self.page.locator("#total [data-total]")

    @screenshot_on_failure
    def test_editor_filters_edits_and_batch_deletes_with_working_history(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        expect(page).to_have_url(self.facts_url)
        expect(self.total()).to_have_attribute("data-total", "12")
        expect(page.get_by_text("globex_only")).to_have_count(0)

        # Switch tabs (htmx, URL pushed) and come back.
        page.get_by_role("navigation", name="Memory types").get_by_role("link", name="Users").click()
        expect(page).to_have_url(re.compile(r"/users/$"))
        expect(page.get_by_role("link", name="Ada", exact=True)).to_be_visible()
        page.get_by_role("navigation", name="Memory types").get_by_role("link", name="Facts").click()
        expect(self.total()).to_have_attribute("data-total", "12")

        # Filter with the API's FilterSet; the URL follows, and Back undoes it.
        page.get_by_text("Filters", exact=True).click()
        page.get_by_label("Scope").select_option("agent")
        expect(self.total()).to_have_attribute("data-total", "1")
        expect(page).to_have_url(re.compile(r"scope=agent"))
        page.go_back()
        expect(page).to_have_url(self.facts_url)
        expect(self.total()).to_have_attribute("data-total", "12")

        # Edit a fact inline: the row turns into a form, then back into a row with the new value.
        row = page.locator("tr", has_text="user_timezone")
        row.get_by_role("link", name=re.compile("^Edit")).click()
        editor = page.get_by_role("form", name="Edit fact user_timezone")
        editor.get_by_label("Value of user_timezone").fill("Asia/Tokyo")
        editor.get_by_role("button", name="Save").click()
        expect(page.locator("tr", has_text="user_timezone")).to_contain_text("Asia/Tokyo")
        expect(page.locator("#toasts")).to_contain_text("Saved fact.")
        assert Fact.objects.get(key="user_timezone", valid_to__isnull=True).value == "Asia/Tokyo"

        # Batch delete three facts after a confirmation that states the count.
        for key in ("note_00", "note_01", "note_02"):
            page.get_by_label(f"Select fact {key}").check()
        expect(page.locator("[data-selected-count]")).to_have_text("3")
        dialogs = []

        def accept(dialog):
            dialogs.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        page.get_by_role("button", name="Delete selected").click()
        expect(self.total()).to_have_attribute("data-total", "9")
        assert dialogs == ["Delete 3 facts? This cannot be undone."]
        expect(page.locator("#toasts")).to_contain_text("Deleted 3 facts.")
        assert not Fact.objects.filter(key__in=["note_00", "note_01", "note_02"]).exists()

        # Row detail through htmx, Back returns to the list.
        page.get_by_role("link", name="user_timezone", exact=True).click()
        expect(page.get_by_role("heading", name="Version history")).to_be_visible()
        expect(page.locator("main")).to_contain_text("Europe/Paris")
        page.go_back()
        expect(page).to_have_url(self.facts_url)
        expect(self.total()).to_have_attribute("data-total", "9")

    @screenshot_on_failure
    def test_deep_links_open_as_full_pages_and_back_reloads_them(self):
        page = self.page
        self.log_in("viewer", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/?scope=user&sort=key")
        expect(self.total()).to_have_attribute("data-total", "1")
        expect(page.get_by_label("Scope")).to_have_value("user")
        current = Fact.objects.get(key="user_timezone")
        page.goto(f"{self.facts_url}{current.pk}/")
        expect(page.get_by_role("heading", name="Version history")).to_be_visible()
        page.go_back()
        expect(self.total()).to_have_attribute("data-total", "1")
        page.go_forward()
        expect(page.get_by_role("heading", name="Version history")).to_be_visible()

    @screenshot_on_failure
    def test_viewer_sees_no_edit_or_delete_controls(self):
        page = self.page
        self.log_in("viewer", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        expect(self.total()).to_have_attribute("data-total", "12")
        expect(page.get_by_role("button", name="Delete selected")).to_have_count(0)
        expect(page.get_by_role("link", name=re.compile("^Edit"))).to_have_count(0)
        expect(page.get_by_role("link", name="Members")).to_have_count(0)

    @screenshot_on_failure
    def test_admin_switches_workspace_and_creates_an_api_key_shown_once(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        page.get_by_text("Workspace Acme").click()
        page.get_by_role("link", name="Globex").click()
        expect(page).to_have_url(re.compile(rf"/memories/{self.other.pk}/facts/"))
        expect(page.get_by_role("link", name="globex_only", exact=True)).to_be_visible()
        page.get_by_role("link", name="API keys").click()
        page.get_by_label("Name").fill("support-bot")
        page.get_by_role("button", name="Create key").click()
        secret = page.get_by_label("New API key secret")
        expect(secret).to_have_value(re.compile(r"^mem_"))
        expect(page.locator("#toasts")).to_contain_text("Copy its secret now")
        page.reload()
        expect(page.get_by_label("New API key secret")).to_have_count(0)
        expect(page.locator("#keys-list")).to_contain_text("support-bot")

    @screenshot_on_failure
    def test_phone_width_keeps_tabs_and_table_usable(self):
        page = self.page
        page.set_viewport_size({"width": 390, "height": 844})
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        expect(self.total()).to_have_attribute("data-total", "12")
        # The page itself never scrolls sideways; wide tables scroll inside their wrapper.
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        wide = page.evaluate(
            "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > "
            "document.documentElement.clientWidth + 1).slice(0, 5).map(e => e.tagName + '.' + e.className)"
        )
        assert overflow <= 1, (overflow, wide)
        page.get_by_role("navigation", name="Memory types").get_by_role("link", name="Procedures").click()
        expect(page.get_by_text("No procedures yet.")).to_be_visible()
