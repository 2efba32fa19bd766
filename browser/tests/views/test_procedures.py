from browser.tests.base import BrowserTestCase
from procedures.models import Procedure
from procedures.tests.factories import ProcedureFactory


class ProceduresTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.refund = ProcedureFactory(
            workspace=cls.workspace, name="Refund flow", content="Check the order, then refund."
        )
        cls.others = [ProcedureFactory(workspace=cls.workspace, agent=cls.agent) for _ in range(4)]
        cls.foreign = ProcedureFactory(workspace=cls.other_workspace, name="Globex secret")

    def test_full_page_and_fragments_in_bounded_queries(self):
        url = self.url("memories:procedures")
        self.open_as(self.viewer, url)
        # One more for the Review tab's count (browser.selectors.review).
        with self.assertNumQueries(7):
            response = self.client.get(url)
        assert b'data-total="5"' in response.content
        assert b"Refund flow" in response.content and b"Globex secret" not in response.content
        for n in range(10):
            ProcedureFactory(workspace=self.workspace, agent=self.other_agent, name=f"extra {n}")
        with self.assertNumQueries(6):
            self.htmx("get", url, target="results")
        fragment = self.htmx("get", url + "?name=refund", target="results")
        assert b"<html" not in fragment.content and b'data-total="1"' in fragment.content

    def test_filters_from_the_api(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:procedures") + "?agent=-")
        assert b'data-total="1"' in response.content
        response = self.client.get(self.url("memories:procedures") + "?is_active=false")
        assert b'data-total="0"' in response.content
        assert b"No procedures match these filters" in response.content

    def test_detail(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:procedure", pk=self.refund.pk))
        assert b"Check the order, then refund." in response.content

    def test_viewer_cannot_edit_or_delete(self):
        self.login(self.viewer)
        page = self.client.get(self.url("memories:procedures"))
        assert b"Delete selected" not in page.content and b"/edit/" not in page.content
        response = self.client.post(
            self.url("memories:procedure-edit", pk=self.refund.pk),
            {"name": "x", "procedure_type": "prompt_template", "content": "y"},
        )
        assert response.status_code == 403
        assert (
            self.client.post(self.url("memories:procedures-delete"), {"ids": [self.refund.pk]}).status_code
            == 403
        )
        assert Procedure.objects.get(pk=self.refund.pk).name == "Refund flow"

    def test_editor_edits_content_and_conditions_inline(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:procedure-edit", pk=self.refund.pk),
            {
                "name": "Refund flow",
                "procedure_type": "tool_sequence",
                "content": '["lookup_order", "refund"]',
                "content_is_json": "on",
                "trigger_conditions": '{"goal_contains": ["refund"]}',
                "is_active": "on",
            },
            target=f"row-{self.refund.pk}",
        )
        assert response.status_code == 200
        assert "Saved procedure" in response["HX-Trigger"]
        refund = Procedure.objects.get(pk=self.refund.pk)
        assert refund.content == ["lookup_order", "refund"]
        assert refund.trigger_conditions["goal_contains"] == ["refund"]

    def test_invalid_conditions_rerender_the_edit_row(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.url("memories:procedure-edit", pk=self.refund.pk),
            {"name": "", "procedure_type": "prompt_template", "content": "x", "trigger_conditions": "{oops"},
            target=f"row-{self.refund.pk}",
        )
        assert response.status_code == 200
        assert b'class="editing"' in response.content
        assert b"not valid JSON" in response.content
        assert Procedure.objects.get(pk=self.refund.pk).content == "Check the order, then refund."

    def test_batch_delete(self):
        self.login(self.teammate)
        ids = [p.pk for p in self.others[:3]]
        response = self.htmx("post", self.url("memories:procedures-delete"), {"ids": ids}, target="results")
        assert "Deleted 3 procedures." in response["HX-Trigger"]
        assert b'data-total="2"' in response.content

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:procedures")).status_code == 404
        assert self.client.get(self.url("memories:procedure", pk=self.refund.pk)).status_code == 404
        own = self.url("memories:procedure", pk=self.refund.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(own).status_code == 404
