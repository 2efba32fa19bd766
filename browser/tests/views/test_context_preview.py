"""The context preview page (issue 15 item 3): what POST /api/v1/context/ would return for an
agent, a person, a thread and a message, explained, for every role, and nothing of another
workspace."""

import html
from urllib.parse import urlencode

from django.db import connection
from django.test.utils import CaptureQueriesContext

from browser.tests.base import BrowserTestCase
from core.models import AuditEvent
from core.testing_openai import OpenAITestServer
from core.tests.reliability.routes import snapshot, snapshot_diff
from episodic.tests.factories import entry_factory, use_test_embeddings
from procedures.services import procedure_create
from runtime.tests.factories import conversation, person, user_fact


class ContextPreviewPageTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = person(cls.workspace, display_name="Ada")
        cls.thread = conversation(cls.workspace, cls.agent, cls.ada, turns=6)
        user_fact(cls.workspace, cls.ada, "preferred_language", "French", fact_type="user_preference")
        for index in range(25):
            user_fact(cls.workspace, cls.ada, f"hobby_{index}", f"hobby number {index} " * 4)
        procedure_create(
            workspace=cls.workspace,
            name="Refund policy",
            procedure_type="prompt_template",
            content="Refunds within 30 days only.",
            trigger_conditions={"goal_contains": ["refund"]},
        )
        cls.eve = person(cls.other_workspace, external_id="9009", display_name="Eve Outsider")
        cls.eve_thread = conversation(cls.other_workspace, cls.outsider_agent, cls.eve, turns=2)

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        entry_factory(agent=self.agent, memory_user=self.ada, content="Ada buys cat food in bulk.")

    def preview_url(self, workspace=None, **params):
        query = {
            "agent": "assistant",
            "memory_user": "Ada",
            "message": "I want a refund for the cat food",
            "token_budget": "1200",
            **params,
        }
        base = self.url("memories:context-preview")
        if workspace is not None:
            base = base.replace(str(self.workspace.pk), str(workspace.pk))
        return f"{base}?{urlencode(query)}"

    def test_every_role_sees_the_blocks_scores_cuts_and_the_allocation(self):
        for user in (self.viewer, self.teammate, self.owner):
            self.login(user)
            response = self.client.get(self.preview_url())
            assert response.status_code == 200, user
            body = html.unescape(response.content.decode())
            for tag in ("<user-profile>", "<session-memory>", "<memory>", "<procedures>"):
                assert f"<code>{tag}</code>" in body, tag
            assert "- preferred_language: French" in body
            assert "Ada buys cat food in bulk." in body and "Lexical (BM25)" in body
            assert "Refund policy" in body and "goal_contains" in body
            assert "Cut by the budget" in body and "Left out: the block with it would pass its cap" in body
            assert 'class="alloc-bar" role="img"' in body and "Budget allocation" in body
            assert "(the person's continuing thread)" in body and str(self.thread.pk) in body

    def test_without_a_submitted_form_there_is_only_the_form(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:context-preview"))
        assert response.status_code == 200
        body = response.content.decode()
        assert 'name="message"' in body and "Budget allocation" not in body and 'role="alert"' not in body
        assert 'value="assistant"' in body and 'value="researcher"' in body

    def test_htmx_gets_only_the_results(self):
        self.login(self.viewer)
        response = self.client.get(
            self.preview_url(), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="preview-results"
        )
        body = response.content.decode()
        assert response.status_code == 200 and "<html" not in body and "<form" not in body
        assert "Budget allocation" in body

    def test_the_page_is_linked_from_the_tabs(self):
        self.login(self.viewer)
        body = self.client.get(self.url("memories:facts")).content.decode()
        assert self.url("memories:context-preview") in body and "Context preview" in body

    def test_previewing_writes_nothing(self):
        # A person without a thread: the API would create one, the preview does not.
        newcomer = person(self.workspace, external_id="77")
        self.open_as(self.owner, self.url("memories:facts"))
        before, audit = snapshot(self.workspace), AuditEvent.objects.count()
        with self.captureOnCommitCallbacks() as callbacks:
            assert self.client.get(self.preview_url()).status_code == 200
            assert self.client.get(self.preview_url(memory_user=str(newcomer.pk))).status_code == 200
        assert callbacks == []
        assert snapshot_diff(before, snapshot(self.workspace)) == []
        assert AuditEvent.objects.count() == audit

    def test_bad_input_is_a_form_error(self):
        self.login(self.viewer)
        cases = {
            "token_budget": ({"token_budget": "5"}, "greater than or equal to 100"),
            "person": ({"memory_user": "Nobody At All"}, "No memory user matches"),
            "agent": ({"agent": "no-such-agent"}, "Select a valid choice"),
            "neither": ({"memory_user": ""}, "Pick a person, or a thread."),
            # The message travels in the URL of a GET form: capped so a server's line limit holds.
            "message": ({"message": "x" * 2001}, "at most 2000 characters"),
        }
        for name, (params, message) in cases.items():
            response = self.client.get(self.preview_url(**params))
            assert response.status_code == 200, name
            body = html.unescape(response.content.decode())
            assert message in body and "Budget allocation" not in body, name

    def test_the_outsider_gets_a_404_and_ids_of_another_workspace_show_nothing(self):
        self.login(self.outsider)
        assert self.client.get(self.preview_url()).status_code == 404
        # In their own workspace, W1's ids name nothing: a form error, never W1's rows.
        for params in (
            {"memory_user": str(self.ada.pk)},
            {"memory_user": "", "thread": str(self.thread.pk)},
            {"memory_user": str(self.eve.pk), "agent": "researcher"},
        ):
            response = self.client.get(self.preview_url(workspace=self.other_workspace, **params))
            assert response.status_code == 200
            body = response.content.decode()
            assert "Budget allocation" not in body and 'role="alert"' in body, params
            assert "French" not in body and "hobby number" not in body and "Question 0" not in body, params

    def test_an_owner_of_the_other_workspace_previews_their_own_rows(self):
        self.login(self.outsider)
        url = self.preview_url(workspace=self.other_workspace, memory_user=str(self.eve.pk), message="hello")
        response = self.client.get(url)
        assert response.status_code == 200
        body = html.unescape(response.content.decode())
        assert "Budget allocation" in body and "Eve Outsider" in body and "French" not in body

    def test_the_page_and_its_results_cost_a_bounded_number_of_queries(self):
        self.open_as(self.viewer, self.url("memories:facts"))
        # About 26 with the Review tab's count of waiting items, on every /memories page; one more
        # when a cache is cold, depending on the tests that ran before. A ceiling, independent of rows.
        with CaptureQueriesContext(connection) as queries:
            self.client.get(self.preview_url(), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="preview-results")
        assert len(queries) <= 28, len(queries)
