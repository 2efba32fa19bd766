"""JSON typed into the /memories forms passes the API's guard (core.parsers), issue 11 finding 3."""

from browser.tests.base import BrowserTestCase
from facts.models import Fact
from facts.services import fact_remember
from procedures.models import Procedure
from procedures.tests.factories import ProcedureFactory

HOSTILE_JSON = [
    '{"tz": "a\\u0000b"}',
    '["\\ud800"]',
    "[" * 5_000 + "]" * 5_000,
    '{"n": NaN}',
]


class FormJsonGuardTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.fact = fact_remember(
            workspace=cls.workspace, key="user_timezone", value="UTC", scope="global"
        ).fact
        cls.procedure = ProcedureFactory(workspace=cls.workspace, name="Refund flow", content="Refund.")

    def test_fact_value_json_is_refused_in_the_edit_row_and_nothing_stored(self):
        """A \\u0000 escape, a lone surrogate or deep nesting was a 500 on save."""
        self.login(self.teammate)
        url = self.url("memories:fact-edit", pk=self.fact.pk)
        for document in HOSTILE_JSON:
            data = {
                "value": document,
                "value_is_json": "on",
                "fact_type": "world_knowledge",
                "confidence": "0.5",
            }
            response = self.htmx("post", url, data, target=f"row-{self.fact.pk}")
            assert response.status_code == 200, document[:20]
            assert b'class="editing"' in response.content
            if "u0000" in document:
                assert b"NUL character" in response.content
        assert Fact.objects.filter(key="user_timezone").count() == 1
        assert Fact.objects.get(key="user_timezone").value == "UTC"

    def test_procedure_content_and_conditions_are_refused_and_nothing_stored(self):
        self.login(self.teammate)
        url = self.url("memories:procedure-edit", pk=self.procedure.pk)
        base = {
            "name": "Refund flow",
            "procedure_type": "prompt_template",
            "content": "Refund.",
            "is_active": "on",
        }
        for document in HOSTILE_JSON:
            for data in (
                {**base, "content": document, "content_is_json": "on"},
                {**base, "trigger_conditions": document},
            ):
                response = self.htmx("post", url, data, target=f"row-{self.procedure.pk}")
                assert response.status_code == 200, (document[:20], data.keys())
                assert b'class="editing"' in response.content
        procedure = Procedure.objects.get(pk=self.procedure.pk)
        assert (procedure.content, procedure.trigger_conditions) == ("Refund.", {})
