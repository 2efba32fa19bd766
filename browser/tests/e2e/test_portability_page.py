"""End to end: an admin downloads the workspace's export and imports a file, watching the
job's progress bar reach its report; the page holds at desktop and phone widths."""

import os
import tempfile

import pytest
from playwright.sync_api import expect

from browser.tests.e2e.harness import BrowserLiveTestCase, screenshot_on_failure
from browser.tests.e2e.layout import assert_layout_sound
from core.models import Membership
from core.services import agent_get_or_create, operator_create, workspace_create
from core.testing import PASSWORD
from facts.services import fact_remember
from identities.services import memory_user_identify
from portability.registry import Scope
from portability.services import export_lines
from threads.models import Thread
from threads.services import thread_append_messages, thread_create

pytestmark = pytest.mark.browser


class PortabilityPageTests(BrowserLiveTestCase):
    def setUp(self):
        super().setUp()
        self.workspace = workspace_create(name="Acme")
        operator_create(
            workspace=self.workspace, username="admin", password=PASSWORD, role=Membership.Role.ADMIN
        )
        agent_get_or_create(workspace=self.workspace, slug="support-assistant-with-a-long-slug")
        source = workspace_create(name="Legacy")
        agent = agent_get_or_create(workspace=source, slug="support-bot")
        ada = memory_user_identify(workspace=source, channel="telegram", external_id="1001").memory_user
        thread = thread_create(workspace=source, agent=agent, memory_user=ada, title="Trip to Lisbon")
        thread_append_messages(
            thread=thread, messages=[{"role": "user", "content": "I moved to Lisbon."} for _ in range(3)]
        )
        fact_remember(workspace=source, key="city", value="Lisbon", scope="user", memory_user=ada)
        directory = self.enterContext(tempfile.TemporaryDirectory())
        self.file = os.path.join(directory, "legacy-export-with-a-long-file-name.jsonl")
        with open(self.file, "wb") as f:
            for line in export_lines(scope=Scope(workspace=source, history=True)):
                f.write(line)
        self.base = f"/memories/{self.workspace.pk}/portability/"

    @screenshot_on_failure
    def test_an_admin_imports_a_file_and_sees_its_report(self):
        page = self.page
        self.log_in("admin", PASSWORD, next_path=self.base)
        expect(page.get_by_role("heading", name="Export and import")).to_be_visible()
        with page.expect_download() as download:
            page.get_by_role("link", name="Download the whole workspace").click()
        assert download.value.suggested_filename.startswith("memory-workspace-")
        with self.settings(PORTABILITY_IMPORT_DIR=self.enterContext(tempfile.TemporaryDirectory())):
            page.get_by_label("Dry run: report only, store nothing").check()
            page.get_by_label("Export file (.jsonl)").set_input_files(self.file)
            page.get_by_role("button", name="Import").click()
            expect(page.locator("#import-job")).to_contain_text("Would create")
            assert not Thread.objects.filter(workspace=self.workspace).exists()
            page.get_by_label("Export file (.jsonl)").set_input_files(self.file)
            page.get_by_role("button", name="Import").click()
            created = "Created: 1 agent, 1 memory user, 1 channel identity, 1 thread, 3 message"
            expect(page.locator("#import-job")).to_contain_text(created)
        expect(page.locator("#import-job progress")).to_have_attribute("value", "100")
        assert Thread.objects.filter(workspace=self.workspace, title="Trip to Lisbon").exists()
        for width, height in ((1280, 860), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(self.live_server_url + self.base)
            page.wait_for_load_state("networkidle")
            assert_layout_sound(page, f"portability-{width}")
