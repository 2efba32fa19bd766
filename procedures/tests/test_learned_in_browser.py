import json

from django.core.cache import cache

from browser.tests.base import BrowserTestCase
from procedures.models import Procedure


class LearnedProcedureInBrowserTests(BrowserTestCase):
    def setUp(self):
        cache.clear()

    def test_a_proposal_shows_its_origin_and_is_activated_from_the_edit_form(self):
        for n in range(3):
            self.api().post(
                "/api/v1/episodes/",
                {
                    "agent": "assistant",
                    "input": {"goal": f"Refund order {n}"},
                    "actions": [{"tool": "lookup_order"}, {"tool": "refund_order"}],
                    "outcome": "success",
                },
                format="json",
            )
        proposal = self.api().post("/api/v1/procedures/learn/", {}, format="json").json()["proposed"][0]
        self.login(self.teammate)
        listed = self.client.get(self.url("memories:procedures") + "?origin=self_learned&is_active=false")
        assert b'data-total="1"' in listed.content and proposal["name"].encode() in listed.content
        detail = self.client.get(self.url("memories:procedure", pk=proposal["id"]))
        assert b"Learned from episodes" in detail.content and b"from 3 episodes" in detail.content
        response = self.htmx(
            "post",
            self.url("memories:procedure-edit", pk=proposal["id"]),
            {
                "name": proposal["name"],
                "description": proposal["description"],
                "procedure_type": proposal["procedure_type"],
                "content": json.dumps(proposal["content"]),
                "content_is_json": "on",
                "trigger_conditions": json.dumps(proposal["trigger_conditions"]),
                "is_active": "on",
            },
            target=f"row-{proposal['id']}",
        )
        assert response.status_code == 200
        procedure = Procedure.objects.get(pk=proposal["id"])
        assert (procedure.is_active, procedure.origin) == (True, "self_learned")
        matched = self.api().post(
            "/api/v1/procedures/match/", {"goal": "refund my order", "agent": "assistant"}, format="json"
        )
        assert [r["procedure"]["id"] for r in matched.json()["results"]] == [proposal["id"]]
