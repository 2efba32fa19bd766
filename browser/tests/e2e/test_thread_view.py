"""End to end: the thread page's tree in a real browser (issue 15, item 6): switching branches
with and without JavaScript, collapsing tool calls and the summarised span, the node filter, and
the screenshot check at desktop and phone widths."""

import json
import re

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from threads.models import Thread
from threads.services import thread_append_messages, thread_create

pytestmark = pytest.mark.browser

DRAFT = "Day one: the Alfama and a tram ride up to the castle, then dinner in Bairro Alto. "


class ThreadViewTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        agent = agent_get_or_create(workspace=self.workspace, slug="travel-assistant")
        operator_create(
            workspace=self.workspace, username="viewer", password=PASSWORD, role=Membership.Role.VIEWER
        )
        self.thread = thread_create(workspace=self.workspace, agent=agent, title="Lisbon trip")

        def add(*messages, **common):
            return thread_append_messages(thread=self.thread, messages=[{**common, **m} for m in messages])

        (self.hello,) = add({"role": "user", "content": "Hello, I am planning a trip."})
        (self.sure,) = add({"role": "assistant", "content": "Happy to help. Where to?"})
        (self.question,) = add({"role": "user", "content": "Plan three days in Lisbon, please."})
        add({"role": "assistant", "content": "First draft. " + DRAFT * 3})
        calls = [
            {
                "id": "call-1",
                "type": "function",
                "function": {
                    "name": "search_hotels",
                    "arguments": json.dumps({"city": "Lisbon", "nights": 3}),
                },
            },
            {"id": "call-2", "type": "function", "function": {"name": "book_table", "arguments": "{}"}},
        ]
        with override_settings(THREADS_TOOL_RESULT_ARCHIVE_CHARS=200, THREADS_TOOL_RESULT_PREVIEW_CHARS=60):
            self.second, *_ = add(
                {
                    "role": "assistant",
                    "content": "Second draft, with hotels.",
                    "tool_calls": calls,
                    "parent": str(self.question.pk),
                },
                {
                    "role": "tool",
                    "tool_call_id": "call-1",
                    "content": "Hotel Avenida, 120 EUR. " * 20 + "END",
                },
                {
                    "role": "tool",
                    "tool_call_id": "call-2",
                    "content": "Fully booked",
                    "metadata": {"is_error": True},
                },
                {"role": "user", "content": "Make it cheaper."},
                {"role": "assistant", "content": "Cheaper plan: hostels and the metro."},
            )
        (self.third,) = add(
            {"role": "assistant", "content": "Third draft. " + DRAFT * 2, "parent": str(self.question.pk)}
        )
        add(
            {"role": "user", "content": "Find trains to Porto"},
            {"role": "assistant", "content": "Trains found"},
            node_id="researcher-with-a-long-node-name",
        )
        # The rolling summary covers the first two messages of every branch.
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="The user is planning a trip and was greeted.",
            summary_upto_id=self.sure.pk,
            summary_upto_depth=self.sure.depth,
            summary_tokens=10,
            summary_covers_tokens=25,
            summary_method="llm",
        )
        self.path = f"/memories/{self.workspace.pk}/threads/{self.thread.pk}/"

    def tree(self):
        return self.page.locator("#thread-tree")

    @screenshot_on_failure
    def test_switching_branches_and_collapsing_at_both_widths(self):
        page = self.page
        self.log_in("viewer", PASSWORD, next_path=self.path)
        fork = self.tree().locator(".fork")
        expect(fork).to_have_count(1)
        expect(fork.locator(".fork-card")).to_have_count(3)
        expect(fork.locator('[aria-current="true"]')).to_contain_text("Branch 3 of 3")
        expect(self.tree()).to_contain_text("Third draft")
        expect(self.tree()).not_to_contain_text("Cheaper plan")
        assert_layout_sound(page, "thread-1280")

        # htmx swaps the tree in place: the page is not reloaded, the URL follows.
        page.evaluate("window.__notReloaded = true")
        fork.get_by_role("link", name=re.compile("Branch 2 of 3")).click()
        expect(self.tree()).to_contain_text("Cheaper plan: hostels and the metro.")
        expect(page).to_have_url(re.compile(rf"\?leaf={self.second.pk}"))
        assert page.evaluate("window.__notReloaded") is True
        expect(self.tree().locator('.fork [aria-current="true"]')).to_contain_text("Branch 2 of 3")

        # A tool call is collapsed; it opens to its arguments and result, the error marked.
        hotels = self.tree().locator("details.tool-call", has_text="search_hotels")
        expect(hotels.locator(".tool-arguments")).to_be_hidden()
        hotels.locator("summary").click()
        expect(hotels.locator(".tool-arguments")).to_have_text('{\n  "city": "Lisbon",\n  "nights": 3\n}')
        expect(hotels).not_to_contain_text("END")
        hotels.get_by_role("link", name=re.compile("Open the whole result")).click()
        expect(hotels.locator(".tool-output-whole")).to_contain_text("END")
        booking = self.tree().locator("details.tool-call.failed")
        expect(booking.locator("summary")).to_contain_text("error")
        hotels.locator("summary").click()
        expect(hotels.locator(".tool-arguments")).to_be_hidden()

        # The summarised span is marked and folds away.
        span = self.tree().locator("details.summary-span")
        expect(span.locator("summary")).to_contain_text("2 messages on this page are covered")
        expect(self.tree().locator("#summary-mark")).to_contain_text("The user is planning a trip")
        greeting = span.get_by_text("Happy to help. Where to?")
        expect(greeting).to_be_visible()
        span.locator("summary").click()
        expect(greeting).to_be_hidden()
        span.locator("summary").click()

        self.tree().locator("details.tool-call", has_text="book_table").locator("summary").click()
        assert_layout_sound(page, "thread-branch-1280")
        page.set_viewport_size({"width": 375, "height": 812})
        assert_layout_sound(page, "thread-branch-375")

        # The node filter shows a sub-agent's own messages.
        page.get_by_label("Messages of").select_option("researcher-with-a-long-node-name")
        expect(self.tree()).to_contain_text("Trains found")
        expect(self.tree()).not_to_contain_text("Plan three days")
        expect(page).to_have_url(re.compile(r"node=researcher-with-a-long-node-name"))
        assert_layout_sound(page, "thread-node-375")

        page.goto(f"{self.live_server_url}{self.path}")
        page.wait_for_load_state("networkidle")
        assert_layout_sound(page, "thread-375")

    @screenshot_on_failure
    def test_without_javascript_branch_links_and_the_node_filter_still_work(self):
        self.context.close()
        self.context = self.browser.new_context(viewport=self.viewport, java_script_enabled=False)
        self.page = page = self.context.new_page()
        self.log_in("viewer", PASSWORD, next_path=self.path)
        self.tree().locator(".fork").get_by_role("link", name=re.compile("Branch 1 of 3")).click()
        expect(page).to_have_url(re.compile(r"\?leaf="))
        expect(self.tree()).to_contain_text("First draft.")
        expect(self.tree().locator('.fork [aria-current="true"]')).to_contain_text("Branch 1 of 3")
        page.get_by_label("Messages of").select_option("researcher-with-a-long-node-name")
        page.get_by_role("button", name="Show").click()
        expect(self.tree()).to_contain_text("Trains found")
        expect(self.tree()).not_to_contain_text("First draft.")
        page.get_by_label("Messages of").select_option("")
        page.get_by_role("button", name="Show").click()
        expect(self.tree()).to_contain_text("Third draft")
