"""End to end: the Review tab with a realistic queue (held entries with their evidence, held
facts, a learned procedure), the screenshot check at desktop and phone widths, and a reviewer
working through the queue from the keyboard: approve, select and approve, reject with a reason,
merge, edit then approve."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from episodic.models import EpisodicEntry
from episodic.services import entry_content_hash
from facts.models import Fact
from facts.services import fact_remember
from identities.services import memory_user_create
from procedures.models import Procedure
from procedures.services import procedure_create

pytestmark = pytest.mark.browser

HELD_ENTRIES = [
    ("Ada is moving from Lisbon to Porto in the first week of June.", "I'm moving to Porto in early June"),
    (
        "Ada's daughter Maria starts school in September and needs a bus pass.",
        "Maria starts school in September",
    ),
    ("Ada prefers to be called in the morning, before her shift at the hospital.", "call me before my shift"),
    ("Ada keeps two beehives on the roof of her building.", "I keep two beehives on the roof"),
    ("Ada is allergic to penicillin.", "I'm allergic to penicillin"),
    ("Ada asked for the invoice of order 4411 to be sent to her work address.", "send the invoice to work"),
]


class ReviewPageBrowserTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        operator_create(
            workspace=self.workspace, username="rita", password=PASSWORD, role=Membership.Role.EDITOR
        )
        self.agent = agent_get_or_create(workspace=self.workspace, slug="support-bot")
        self.person = memory_user_create(
            workspace=self.workspace, canonical_id="telegram:1", display_name="Ada Lovelace"
        )
        self.stored = self.entry("Ada keeps bees on her roof.", "I keep bees", review="approved")
        self.held = [self.entry(content, evidence) for content, evidence in HELD_ENTRIES]
        # Consolidation compared the beehive entry with the stored bee entry: the page offers the merge.
        beehives = self.held[3]
        beehives.consolidation = {
            "decision": "add",
            "old": str(self.stored.pk),
            "by": "rule",
            "reason": "More detail.",
        }
        beehives.save(update_fields=["consolidation"])
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        for key, value in (
            ("preferred_language", "Portuguese"),
            ("shoe_size", 38),
            ("timezone", "Europe/Lisbon"),
        ):
            fact_remember(
                workspace=self.workspace,
                key=key,
                value=value,
                scope="user",
                fact_type="user_preference",
                agent=self.agent,
                memory_user=self.person,
                evidence=f"my {key.replace('_', ' ')} is {value}",
            )
        learned = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Refund a parcel that arrived late",
            description="Proposed from 6 successful runs of support-bot (goal 'refund late parcel').",
            procedure_type="prompt_template",
            content="Apologise, check the tracking, refund the shipping.",
            actor="test",
        )
        Procedure.objects.filter(pk=learned.pk).update(origin=Procedure.Origin.SELF_LEARNED, is_active=False)
        self.url = f"{self.live_server_url}/memories/{self.workspace.pk}/review/"

    def entry(self, content, evidence, review="held"):
        return EpisodicEntry.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=self.person,
            content=content,
            content_hash=entry_content_hash(content),
            source=EpisodicEntry.Source.USER_ASSERTION,
            evidence=evidence,
            review=review,
            valid_from=timezone.now(),
        )

    def row(self, entry):
        return self.page.locator(f"#row-entry-{entry.pk}")

    def settled(self):
        """After a decision the queue is swapped, then settled: only then does the cursor go to
        the first row left. A key pressed before that lands on whichever row the cursor leaves."""
        expect(self.page.locator("[data-review-row]").first).to_be_focused()

    @screenshot_on_failure
    def test_the_queue_passes_the_screenshot_check_and_is_worked_from_the_keyboard(self):
        page = self.page
        self.log_in("rita", PASSWORD, next_path=f"/memories/{self.workspace.pk}/review/")
        expect(page.get_by_role("heading", name="Review")).to_be_visible()
        expect(page.get_by_role("link", name="Review (10)")).to_be_visible()
        expect(page.locator("[data-review-row]")).to_have_count(10)
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(self.url)
            page.wait_for_load_state("networkidle")
            page.get_by_text("Keyboard shortcuts").click()
            assert_layout_sound(page, f"review-{width}")
        page.set_viewport_size({"width": 1280, "height": 860})
        page.goto(self.url)
        page.wait_for_load_state("networkidle")

        # j moves to the first (newest) row, a approves it.
        newest = page.locator("[data-review-row]").first
        newest_key = newest.get_attribute("data-review-row")
        page.keyboard.press("j")
        expect(newest).to_have_class(re.compile("review-current"))
        page.keyboard.press("a")
        expect(page.locator(f'[data-review-row="{newest_key}"]')).to_have_count(0)
        expect(page.locator("#toasts")).to_contain_text("Approved 1 item.")

        # After a decision the cursor is on the first row left: x selects it, j x the next, Shift+A.
        rows = page.locator("[data-review-row]")
        first_key, second_key = (
            rows.nth(0).get_attribute("data-review-row"),
            rows.nth(1).get_attribute("data-review-row"),
        )
        expect(rows.nth(0)).to_have_class(re.compile("review-current"))
        page.keyboard.press("x")
        page.keyboard.press("j")
        page.keyboard.press("x")
        expect(page.locator("[data-selected-count]")).to_have_text("2")
        page.keyboard.press("Shift+A")
        expect(page.locator("#toasts")).to_contain_text("Approved 2 items.")
        for key in (first_key, second_key):
            expect(page.locator(f'[data-review-row="{key}"]')).to_have_count(0)
        self.settled()

        # r puts the cursor in the row's reason box; Enter rejects with that reason.
        penicillin = self.held[4]
        self.row(penicillin).focus()
        page.keyboard.press("r")
        expect(self.row(penicillin).locator("[data-review-reason]")).to_be_focused()
        page.keyboard.type("Said about her sister, not Ada.")
        page.keyboard.press("Enter")
        expect(self.row(penicillin)).to_have_count(0)
        self.settled()
        penicillin.refresh_from_db()
        assert (penicillin.review, penicillin.review_note) == ("rejected", "Said about her sister, not Ada.")

        # m merges the beehive entry into the stored bee entry it was compared with.
        beehives = self.held[3]
        self.row(beehives).focus()
        page.keyboard.press("m")
        expect(self.row(beehives)).to_have_count(0)
        self.settled()
        beehives.refresh_from_db()
        assert beehives.review == "merged" and beehives.superseded_by_id == self.stored.pk

        # e opens the edit row; the new text is approved as written.
        remaining = self.held[0]
        if remaining.review == "held" and self.row(remaining).count():
            target = remaining
        else:
            target = next(e for e in self.held if self.row(e).count())
        self.row(target).focus()
        page.keyboard.press("e")
        box = page.get_by_label("Content")
        expect(box).to_be_visible()
        box.fill("Ada moves to Porto on 3 June.")
        page.get_by_role("button", name="Save and approve").click()
        expect(page.locator("#toasts")).to_contain_text("Edited and approved.")
        target.refresh_from_db()
        assert (target.content, target.review) == ("Ada moves to Porto on 3 June.", "approved")

        # The tab's count follows the queue: 10 waited, 6 were decided.
        expect(page.get_by_role("link", name="Review (4)")).to_be_visible()
        held = (
            Fact.objects.filter(review="held").count() + EpisodicEntry.objects.filter(review="held").count()
        )
        assert held == 4
