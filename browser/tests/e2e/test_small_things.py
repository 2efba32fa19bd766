"""End to end: the filter picker by keyboard, tool calls on the thread page, and layouts that
hold at phone and desktop widths (issue 18, "small things a user sees")."""

import json
import re

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound, layout_problems
from checkpoints.services import checkpoint_put, checkpoint_writes_put
from core.models import Membership
from core.services import agent_get_or_create, api_key_create, operator_create, workspace_create
from core.testing import PASSWORD
from episodes.services import episode_create, episode_feedback
from episodic.models import EpisodicEntry
from episodic.services import entry_content_hash, entry_normalize
from facts.services import fact_remember
from identities.services import memory_user_create, memory_user_identify
from procedures.services import procedure_create
from threads.services import thread_append_messages, thread_create

pytestmark = pytest.mark.browser

LIST_TABS = (
    "facts",
    "episodes",
    "entries",
    "threads",
    "checkpoints",
    "procedures",
    "users",
    "members",
    "api-keys",
)

# Every visible .table-wrap whose content is wider than its box, and the page's own overflow.
OVERFLOW_JS = """() => {
  const wraps = [...document.querySelectorAll('.table-wrap')].filter(w => w.offsetParent !== null);
  const wide = wraps.filter(w => w.scrollWidth > w.clientWidth + 1)
    .map(w => [w.closest('section, #results, main').id || 'main', w.scrollWidth, w.clientWidth]);
  const doc = document.documentElement;
  return {tables: wraps.length, wide, page: doc.scrollWidth - doc.clientWidth};
}"""

# Pairs of boxes that cover each other: the cells of one table row, the fields of the filter
# bar, the items of the toolbar and top bar.
OVERLAP_JS = """() => {
  const groups = [
    ...[...document.querySelectorAll('.table tr')].map(tr => [...tr.children]),
    [...document.querySelectorAll('.filters > *:not(.filters-more)')],
    [...document.querySelectorAll('.toolbar > *')],
    [...document.querySelectorAll('.topbar > *')],
  ];
  const hits = [];
  for (const group of groups) {
    const boxes = group.filter(e => e.offsetParent !== null).map(e => [e, e.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, ra] = boxes[i], [b, rb] = boxes[j];
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > 1 && h > 1) hits.push([a.tagName + '.' + a.className, b.tagName + '.' + b.className,
                                     (a.textContent || '').trim().slice(0, 30)]);
    }
  }
  return hits;
}"""


class SmallThingsTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        self.other = workspace_create(name="Globex")
        agent = agent_get_or_create(workspace=self.workspace, slug="assistant-with-a-long-slug")
        operator_create(
            workspace=self.workspace, username="admin", password=PASSWORD, role=Membership.Role.ADMIN
        )
        api_key_create(
            workspace=self.workspace, name="a key with a rather long descriptive name", agent=agent
        )
        self.ada = memory_user_identify(
            workspace=self.workspace, channel="telegram", external_id="1001", profile={"name": "Ada Lovelace"}
        ).memory_user
        self.adam = memory_user_create(
            workspace=self.workspace, canonical_id="email:adam@example.com", display_name="Adam"
        )
        memory_user_create(workspace=self.other, canonical_id="telegram:1001", display_name="Ada of Globex")
        self.thread = thread_create(
            workspace=self.workspace,
            agent=agent,
            memory_user=self.ada,
            channel="telegram",
            channel_chat_id="chat-with-a-very-long-identifier-0123456789",
            title="Weather and a rather long thread title that needs room",
        )
        calls = [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Lisbon", "unit": "C"})},
            }
        ]
        with override_settings(THREADS_TOOL_RESULT_ARCHIVE_CHARS=200, THREADS_TOOL_RESULT_PREVIEW_CHARS=40):
            question, _, _, _ = thread_append_messages(
                thread=self.thread,
                messages=[
                    {"role": "user", "content": "Weather in Lisbon?"},
                    {"role": "assistant", "content": "", "tool_calls": calls},
                    {"role": "tool", "tool_call_id": "call-1", "content": "Sunny, 24 degrees. " * 40 + "END"},
                    {"role": "assistant", "content": "Sunny."},
                ],
            )
        for n in range(3):
            fact_remember(
                workspace=self.workspace,
                key=f"a_rather_long_fact_key_number_{n}_without_spaces",
                value="A value long enough to wrap over several lines on a phone screen. " * 3,
                scope="user",
                memory_user=self.ada,
            )
        fact_remember(workspace=self.workspace, key="motto", value="be kind", scope="global")
        episode = episode_create(
            workspace=self.workspace,
            agent=agent,
            memory_user=self.ada,
            thread=self.thread,
            trigger_type="chat",
        )
        episode_feedback(episode=episode, rating=4, comment="Helpful and quick.", actor="test")
        procedure_create(
            workspace=self.workspace,
            agent=agent,
            name="Refund with a long procedure name",
            procedure_type="prompt_template",
            content="Say sorry.",
        )
        content = entry_normalize("Ada moved to Lisbon in May, and prefers trains to planes.")
        EpisodicEntry.objects.create(
            workspace=self.workspace,
            agent=agent,
            memory_user=self.ada,
            content=content,
            content_hash=entry_content_hash(content),
            source=EpisodicEntry.Source.USER_ASSERTION,
            evidence=content,
            source_thread=self.thread,
            source_message_ids=[str(question.pk)],
        )
        checkpoint, _ = checkpoint_put(
            thread=self.thread,
            checkpoint_ns="",
            checkpoint_id="checkpoint-with-a-long-identifier-0001",
            parent_checkpoint_id=None,
            type="msgpack",
            data=b"state",
            metadata={"step": 1, "source": "loop"},
        )
        checkpoint_writes_put(
            checkpoint=checkpoint,
            task_id="task-0",
            writes=[{"idx": 0, "channel": "messages", "type": "msgpack", "data": b"x"}],
        )
        self.base = f"{self.live_server_url}/memories/{self.workspace.pk}"

    def total(self):
        return self.page.locator("#total [data-total]")

    @screenshot_on_failure
    def test_the_user_filter_picks_a_person_by_keyboard(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        expect(self.total()).to_have_attribute("data-total", "4")
        page.get_by_text("Filters", exact=True).click()
        box = page.get_by_role("combobox", name="Memory user")
        expect(box).to_have_attribute("aria-expanded", "false")
        box.press_sequentially("ad", delay=30)
        listbox = page.get_by_role("listbox", name="Matching memory users")
        expect(listbox.get_by_role("option")).to_have_count(2)
        expect(box).to_have_attribute("aria-expanded", "true")
        expect(listbox).not_to_contain_text("Globex")
        # Typing did not apply the half-typed name as a filter.
        expect(self.total()).to_have_attribute("data-total", "4")
        box.press("ArrowDown")
        first = listbox.get_by_role("option").first
        expect(first).to_have_attribute("aria-selected", "true")
        expect(box).to_have_attribute("aria-activedescendant", first.get_attribute("id"))
        box.press("ArrowDown")
        box.press("ArrowDown")  # wraps around to the first again
        expect(first).to_have_attribute("aria-selected", "true")
        option = listbox.get_by_role("option", name=re.compile("Ada Lovelace"))
        while option.get_attribute("aria-selected") != "true":
            box.press("ArrowDown")
        box.press("Enter")
        expect(box).to_have_value(str(self.ada.pk))
        expect(box).to_have_attribute("aria-expanded", "false")
        expect(listbox).to_be_hidden()
        expect(page.locator("#filter-memory_user-hint")).to_contain_text("Ada Lovelace")
        expect(self.total()).to_have_attribute("data-total", "3")
        expect(page).to_have_url(re.compile(rf"memory_user={self.ada.pk}"))
        # Escape closes the list without choosing.
        box.fill("")
        box.press_sequentially("adam", delay=30)
        expect(listbox.get_by_role("option")).to_have_count(1)
        box.press("Escape")
        expect(box).to_have_attribute("aria-expanded", "false")
        # A name typed and submitted without picking works too.
        box.press("Enter")
        expect(self.total()).to_have_attribute("data-total", "0")
        expect(page.locator("#filter-memory_user-hint")).to_contain_text("Adam")

    @screenshot_on_failure
    def test_a_tool_call_shows_its_name_arguments_and_result(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/threads/{self.thread.pk}/")
        call = page.locator("details.tool-call")
        expect(call).to_have_count(1)
        expect(call.locator("summary")).to_contain_text("get_weather")
        expect(call.locator(".tool-arguments")).to_be_hidden()
        call.locator("summary").click()
        expect(call.locator(".tool-arguments")).to_have_text('{\n  "city": "Lisbon",\n  "unit": "C"\n}')
        expect(call.locator(".tool-output").first).to_contain_text("Sunny, 24 degrees.")
        expect(call).not_to_contain_text("END")
        call.get_by_role("link", name=re.compile("Open the whole result")).click()
        expect(call.locator(".tool-output-whole")).to_contain_text("END")
        # The result is folded into its call, not repeated as a row of its own.
        expect(page.locator("details.tool-result")).to_have_count(0)

    @screenshot_on_failure
    def test_at_phone_width_no_table_scrolls_sideways(self):
        page = self.page
        page.set_viewport_size({"width": 375, "height": 812})
        self.log_in("admin", PASSWORD)
        pages = [f"{self.base}/{tab}/" for tab in LIST_TABS] + [
            f"{self.base}/threads/{self.thread.pk}/",
            f"{self.base}/facts/{self.ada.facts.first().pk}/",
            f"{self.base}/users/{self.ada.pk}/",
            f"{self.base}/checkpoints/{self.thread.checkpoints.first().pk}/",
        ]
        measured = 0
        for url in pages:
            page.goto(url)
            page.wait_for_load_state("networkidle")
            result = page.evaluate(OVERFLOW_JS)
            assert not result["wide"] and result["page"] <= 1, (url, result)
            measured += result["tables"]
        assert measured >= len(LIST_TABS)
        # Each row is a card whose cells name their column.
        page.goto(f"{self.base}/facts/")
        cell = page.locator("tbody tr").first.locator("td[data-label=Value]")
        label = cell.evaluate("td => getComputedStyle(td, '::before').content")
        assert label == '"Value"', label
        assert page.locator("tbody tr").first.evaluate("tr => getComputedStyle(tr).display") == "block"

    @screenshot_on_failure
    def test_at_desktop_width_tables_stay_tables_and_nothing_overlaps(self):
        page = self.page
        self.log_in("admin", PASSWORD)
        for tab in LIST_TABS:
            page.goto(f"{self.base}/{tab}/")
            page.wait_for_load_state("networkidle")
            assert page.evaluate(OVERLAP_JS) == [], tab
            assert page.evaluate(OVERFLOW_JS)["page"] <= 1, tab
            assert (
                page.locator("tbody tr").first.evaluate("tr => getComputedStyle(tr).display") == "table-row"
            )
        page.goto(f"{self.base}/facts/")
        page.get_by_text("Filters", exact=True).click()
        assert page.evaluate(OVERLAP_JS) == []

    @screenshot_on_failure
    def test_every_page_passes_the_screenshot_check_at_both_widths(self):
        page = self.page
        self.log_in("admin", PASSWORD)
        pages = {tab: f"{self.base}/{tab}/" for tab in LIST_TABS} | {
            "thread": f"{self.base}/threads/{self.thread.pk}/",
            "fact": f"{self.base}/facts/{self.ada.facts.first().pk}/",
            "user": f"{self.base}/users/{self.ada.pk}/",
            "checkpoint": f"{self.base}/checkpoints/{self.thread.checkpoints.first().pk}/",
        }
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            for name, url in pages.items():
                page.goto(url)
                page.wait_for_load_state("networkidle")
                assert_layout_sound(page, f"{name}-{width}")

    @screenshot_on_failure
    def test_the_screenshot_check_fails_on_overlap_and_overflow(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/facts/")
        assert layout_problems(page) == []
        page.add_style_tag(content=".table td:nth-child(3) { position: relative; left: -120px; }")
        assert any(p.startswith("overlap: ") for p in layout_problems(page))
        page.add_style_tag(content=".table td:nth-child(3) { left: 0; } main { min-width: 1600px; }")
        problems = layout_problems(page)
        assert problems and problems[0].startswith("page is ") and "wider than the window" in problems[0]

    @screenshot_on_failure
    def test_the_rating_is_an_icon_with_text_not_a_glyph(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=f"/memories/{self.workspace.pk}/episodes/")
        rating = page.locator(".rating").first
        expect(rating.locator("svg")).to_have_count(1)
        expect(rating).to_contain_text("Rated 4 out of 5")
        expect(page.locator(".comment-icon svg")).to_have_count(1)
        expect(page.locator("main")).not_to_contain_text("💬")
