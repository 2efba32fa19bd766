"""The person page in headless Chromium: sections that search and page on their own, the
screenshot check at both widths, and erasure through its preview."""

import re

import pytest
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from browser.tests.views.test_person import person_rows
from browser.views.person import HOLD_NOT_LISTED
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import memory_user_identify, memory_user_merge

pytestmark = pytest.mark.browser


class PersonPageBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        operator_create(
            workspace=self.workspace, username="admin", password=PASSWORD, role=Membership.Role.ADMIN
        )
        self.ada = memory_user_identify(
            workspace=self.workspace, channel="telegram", external_id="1001", profile={"name": "Ada Lovelace"}
        ).memory_user
        mail = memory_user_identify(
            workspace=self.workspace, channel="email", external_id="ada@example.com"
        ).memory_user
        memory_user_merge(source=mail, target=self.ada, actor="operator:admin")
        self.bob = memory_user_identify(
            workspace=self.workspace, channel="slack", external_id="U42", profile={"name": "Bob"}
        ).memory_user
        person_rows(self.workspace, self.agent, self.ada, "ada", n=3)
        person_rows(self.workspace, self.agent, self.bob, "bob")
        for i in range(12):
            fact_remember(
                workspace=self.workspace,
                key=f"preference_{i:02d}",
                value=f"A longer remembered preference number {i} about how Ada likes her answers written",
                scope="user",
                memory_user=self.ada,
                fact_type="user_preference",
            )
        self.users_url = f"{self.live_server_url}/memories/{self.workspace.pk}/users/"
        self.person_url = f"{self.users_url}{self.ada.pk}/"

    @screenshot_on_failure
    def test_sections_search_and_page_alone_and_the_layout_holds(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/users/")
        page.get_by_role("link", name="Ada Lovelace", exact=True).click()
        expect(page).to_have_url(self.person_url)
        facts = page.locator("#person-facts")
        expect(facts.locator("[data-total]")).to_have_attribute("data-total", "15")
        expect(page.locator("#person-merges")).to_contain_text("ada@example.com")
        expect(page.locator("#person-procedures")).to_contain_text("ada procedure 0")
        expect(page.locator("main")).not_to_contain_text("bob thread")

        # Paging the facts swaps only their section; the audit section's node stays the same.
        page.locator("#person-audit table").evaluate("t => t.dataset.marker = 'kept'")
        facts.get_by_role("link", name=re.compile("^Next")).click()
        expect(page).to_have_url(re.compile(r"facts_page=2"))
        expect(facts).to_contain_text("11–15 of 15")
        expect(page.locator("#person-audit table[data-marker=kept]")).to_have_count(1)

        # Searching the threads keeps the facts' page in the URL.
        page.get_by_label("Search threads").fill("thread 2")
        expect(page.locator("#person-threads [data-total]")).to_have_attribute("data-total", "1")
        expect(page).to_have_url(
            re.compile(r"facts_page=2.*threads_q=thread\+2|threads_q=thread\+2.*facts_page=2")
        )
        expect(facts).to_contain_text("11–15 of 15")

        page.goto(self.person_url)
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_load_state("networkidle")
            assert_layout_sound(page, f"person-{width}")

    @screenshot_on_failure
    def test_admin_erases_after_the_preview(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/users/{self.ada.pk}/")
        page.get_by_role("link", name="Erase…").click()
        preview = page.locator("#person-erase")
        expect(preview).to_contain_text("Erase Ada Lovelace?")
        expect(preview.locator('[data-count="memory users"]')).to_have_text("2")
        expect(preview.locator('[data-count="identities"]')).to_have_text("2")
        expect(preview.locator('[data-count="facts"]')).to_have_text("15")
        assert_layout_sound(page, "person-erase-1280")
        preview.get_by_role("button", name=re.compile(r"^Erase \d+ rows")).click()
        expect(page).to_have_url(self.users_url)
        expect(page.locator("#toasts, .messages, main").first).to_be_visible()
        expect(page.get_by_role("link", name="Ada Lovelace", exact=True)).to_have_count(0)
        assert not MemoryUser.objects.filter(pk=self.ada.pk).exists()
        assert MemoryUser.objects.filter(pk=self.bob.pk).exists()

    @screenshot_on_failure
    def test_admin_releases_a_merged_records_hold_on_the_survivor(self):
        mail = MemoryUser.objects.get(merged_into=self.ada)
        MemoryUser.objects.filter(pk=mail.pk).update(
            legal_hold_at=self.ada.created_at, legal_hold_reason="Case 2", legal_hold_by="operator:admin"
        )
        page = self.page
        page.on("dialog", lambda dialog: dialog.accept())
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/users/{self.ada.pk}/")
        holds = page.locator("#person-holds")
        expect(holds.locator(f'[data-placed-on="{mail.pk}"]')).to_contain_text("Case 2")
        holds.get_by_role("button", name=re.compile("^Release")).click()
        expect(holds).to_contain_text("No legal hold covers this person.")
        expect(page.locator("#toasts")).to_contain_text("Case 2")
        mail.refresh_from_db()
        assert mail.legal_hold_at is None

    @screenshot_on_failure
    def test_a_refused_release_swaps_in_the_holds_as_they_are_now(self):
        """Before: the refusal (a hold released meanwhile by someone else) was a 404 that htmx
        did not swap, so the page went on listing the hold with its Release button."""
        mail = MemoryUser.objects.get(merged_into=self.ada)
        MemoryUser.objects.filter(pk=mail.pk).update(
            legal_hold_at=self.ada.created_at, legal_hold_reason="Case 2", legal_hold_by="operator:admin"
        )
        page = self.page
        page.on("dialog", lambda dialog: dialog.accept())
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/users/{self.ada.pk}/")
        holds = page.locator("#person-holds")
        expect(holds.locator(f'[data-placed-on="{mail.pk}"]')).to_contain_text("Case 2")
        MemoryUser.objects.filter(pk=mail.pk).update(legal_hold_at=None, legal_hold_reason="")

        holds.get_by_role("button", name=re.compile("^Release")).click()

        expect(holds.locator('[role=alert][data-refusal="not_found"]')).to_contain_text(HOLD_NOT_LISTED)
        expect(holds).to_contain_text("No legal hold covers this person.")
        expect(holds.get_by_role("button", name=re.compile("^Release"))).to_have_count(0)
