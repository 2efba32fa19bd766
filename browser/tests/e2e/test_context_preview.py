"""End to end: the context preview used with the keyboard only (Tab, typing, arrows, Enter;
no click), and its screenshot check at desktop and phone widths (issue 15 item 3)."""

import re

import pytest
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import entry_factory, use_test_embeddings
from procedures.services import procedure_create
from runtime.tests.factories import conversation, person, session_fact, user_fact
from threads.models import Message

pytestmark = pytest.mark.browser

MESSAGE = "I want a refund for the cat food"


class ContextPreviewBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.workspace = workspace_create(name="Acme")
        use_test_embeddings(self.server, self.workspace)
        # An editor: the role that tunes what agents remember (the admin links are not in its top bar).
        operator_create(
            workspace=self.workspace, username="editor", password=PASSWORD, role=Membership.Role.EDITOR
        )
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        agent_get_or_create(workspace=self.workspace, slug="researcher")
        self.ada = person(self.workspace, display_name="Ada Lovelace")
        self.thread = conversation(self.workspace, self.agent, self.ada, turns=8)
        user_fact(self.workspace, self.ada, "preferred_language", "French", fact_type="user_preference")
        for index in range(30):
            user_fact(self.workspace, self.ada, f"hobby_{index}", f"hobby number {index} is a long one " * 3)
        session_fact(self.workspace, self.thread, "current_ticket", "T-1234")
        procedure_create(
            workspace=self.workspace,
            name="Refund policy",
            procedure_type="prompt_template",
            content="Check the order date; refunds within 30 days only.",
            trigger_conditions={"goal_contains": ["refund"]},
        )
        for content in (
            "Ada buys cat food in bulk every month.",
            "Ada adopted a cat named Miso.",
            "Ada moved to Lisbon in May.",
        ):
            entry_factory(agent=self.agent, memory_user=self.ada, content=content)
        self.url = f"{self.live_server_url}/memories/{self.workspace.pk}/context/"

    def tab_to(self, element_id: str, limit: int = 80) -> None:
        """Press Tab until the element with `element_id` has the focus."""
        for _ in range(limit):
            if self.page.evaluate("() => document.activeElement && document.activeElement.id") == element_id:
                return
            self.page.keyboard.press("Tab")
        raise AssertionError(f"Tab never reached #{element_id}")

    @screenshot_on_failure
    def test_the_form_is_used_with_the_keyboard_only_and_the_page_lays_out_at_both_widths(self):
        page = self.page
        messages = Message.objects.count()
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/context/")
        expect(page.get_by_role("heading", name="Context preview")).to_be_visible()

        self.tab_to("id_agent")
        page.keyboard.press("ArrowDown")  # assistant -> researcher
        page.keyboard.press("ArrowUp")  # and back
        expect(page.locator("#id_agent")).to_have_value("assistant")
        page.keyboard.press("Tab")
        box = page.get_by_role("combobox", name="Person")
        expect(box).to_be_focused()
        page.keyboard.type("Ada", delay=40)
        listbox = page.get_by_role("listbox", name="Matching memory users")
        expect(listbox.get_by_role("option")).to_have_count(1)
        page.keyboard.press("ArrowDown")
        page.keyboard.press("Enter")
        expect(box).to_have_value(str(self.ada.pk))
        expect(page.locator("#id_memory_user-hint")).to_contain_text("Ada Lovelace")
        # Thread and node stay empty: the person's continuing thread is used.
        page.keyboard.press("Tab")
        expect(page.get_by_role("combobox", name="Thread")).to_be_focused()
        page.keyboard.press("Tab")
        expect(page.get_by_label("Node")).to_be_focused()
        page.keyboard.press("Tab")
        expect(page.get_by_label("Next user message")).to_be_focused()
        page.keyboard.type(MESSAGE)
        page.keyboard.press("Tab")
        budget = page.get_by_label("Token budget")
        expect(budget).to_be_focused()
        page.keyboard.press("Control+A")
        page.keyboard.type("1500")
        page.keyboard.press("Tab")
        button = page.get_by_role("button", name="Preview")
        expect(button).to_be_focused()
        page.keyboard.press("Enter")

        results = page.locator("#preview-results")
        expect(results.get_by_role("heading", name=re.compile(r"of 1,500 tokens"))).to_be_visible()
        for block in ("<user-profile>", "<session-memory>", "<memory>", "<procedures>"):
            expect(results.get_by_role("heading", name=re.compile(re.escape(block)))).to_be_visible()
        expect(results).to_contain_text("- preferred_language: French")
        expect(results).to_contain_text("Ada buys cat food in bulk every month.")
        expect(results).to_contain_text("Refund policy")
        expect(results.get_by_role("heading", name=re.compile("Cut by the budget")).first).to_be_visible()
        expect(results.get_by_role("img", name=re.compile("Budget of 1500 tokens"))).to_be_visible()
        expect(results).to_contain_text("(the person's continuing thread)")
        # The memory block's table names the parts of each score.
        memory = page.locator("#block-memory")
        expect(memory.get_by_role("columnheader", name="Lexical (BM25)")).to_be_visible()
        expect(memory.get_by_role("columnheader", name="Recency")).to_be_visible()
        # htmx swapped only the results: the focus stayed on the button, the URL is shareable.
        expect(button).to_be_focused()
        expect(page).to_have_url(re.compile(rf"memory_user={self.ada.pk}.*token_budget=1500"))
        assert Message.objects.count() == messages  # nothing appended

        assert_layout_sound(page, "context-preview-1280")
        shared = page.url
        page.set_viewport_size({"width": 375, "height": 812})
        page.goto(shared)
        page.wait_for_load_state("networkidle")
        expect(page.locator("#block-memory")).to_be_visible()
        assert_layout_sound(page, "context-preview-375")

    @screenshot_on_failure
    def test_a_form_error_is_announced_and_nothing_is_built(self):
        page = self.page
        self.log_in("editor", PASSWORD, next_path=f"/memories/{self.workspace.pk}/context/")
        self.tab_to("id_memory_user")
        page.keyboard.type("Nobody")
        page.keyboard.press("Escape")
        self.tab_to("id_token_budget")
        page.keyboard.press("Enter")
        alert = page.locator("#preview-results [role=alert]")
        expect(alert).to_contain_text("No memory user matches")
        expect(page.locator("#preview-results")).not_to_contain_text("Budget allocation")
        assert_layout_sound(page, "context-preview-error-1280")
