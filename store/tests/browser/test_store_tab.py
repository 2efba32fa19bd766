import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.testing import MemoryTestCase
from store.models import StoreItem
from store.tests.factories import make_item


class StoreTabTests(MemoryTestCase):
    def setUp(self):
        self.shared = make_item(workspace=self.workspace, namespace=("memories", "ada"), key="city")
        self.agents = make_item(
            workspace=self.workspace,
            agent=self.agent,
            namespace=("prefs", "bo"),
            key="tone",
            value={"v": "dry"},
        )
        self.foreign = make_item(workspace=self.other_workspace, namespace=("memories", "eve"), key="secret")
        self.base = f"/memories/{self.workspace.pk}/store/"

    def test_the_list_filters_by_namespace_prefix_and_words(self):
        self.login(self.viewer)
        page = self.client.get(self.base)
        assert page.status_code == 200
        assert b"city" in page.content and b"tone" in page.content and b"secret" not in page.content
        only = self.client.get(self.base, {"namespace_prefix": "prefs"})
        assert b"tone" in only.content and b"city" not in only.content
        words = self.client.get(self.base, {"q": "Lisbon"})
        assert b"city" in words.content and b"tone" not in words.content
        agent = self.client.get(self.base, {"agent": "assistant"})
        assert b"tone" in agent.content and b"city" not in agent.content

    def test_the_list_costs_the_same_queries_for_more_rows(self):
        self.login(self.viewer)
        self.client.get(self.base)
        with CaptureQueriesContext(connection) as few:
            self.client.get(self.base)
        for n in range(10):
            make_item(workspace=self.workspace, agent=self.other_agent, key=f"k{n}")
        with CaptureQueriesContext(connection) as many:
            self.client.get(self.base)
        assert len(many) == len(few)

    def test_inline_edit_replaces_the_value_and_refuses_non_objects(self):
        self.login(self.teammate)
        url = f"{self.base}{self.shared.pk}/edit/"
        form = self.client.get(url, headers={"HX-Request": "true"})
        assert form.status_code == 200 and b"Lisbon" in form.content
        bad = self.client.post(url, {"value": "[1, 2]"}, headers={"HX-Request": "true"})
        assert bad.status_code == 200 and b"must be a JSON object" in bad.content
        saved = self.client.post(
            url, {"value": json.dumps({"text": "Ada lives in Porto."})}, headers={"HX-Request": "true"}
        )
        assert saved.status_code == 200
        item = StoreItem.objects.get(pk=self.shared.pk)
        assert item.value == {"text": "Ada lives in Porto."}
        assert "Porto" in item.search_text

    def test_batch_delete(self):
        self.login(self.teammate)
        response = self.client.post(
            f"{self.base}delete/",
            {"ids": [str(self.shared.pk), str(self.agents.pk)], "confirmed": "on"},
            headers={"HX-Request": "true"},
        )
        assert response.status_code == 200
        assert list(StoreItem.objects.values_list("key", flat=True)) == ["secret"]

    def test_viewer_cannot_edit_or_delete(self):
        self.login(self.viewer)
        assert self.client.post(f"{self.base}{self.shared.pk}/edit/", {"value": "{}"}).status_code == 403
        self.client.post(f"{self.base}delete/", {"ids": [str(self.shared.pk)], "confirmed": "on"})
        assert StoreItem.objects.filter(pk=self.shared.pk).exists()

    def test_outsider_cannot_read_edit_or_delete(self):
        self.login(self.outsider)
        assert self.client.get(self.base).status_code in (403, 404)
        other = f"/memories/{self.other_workspace.pk}/store/"
        assert self.client.get(f"{other}{self.shared.pk}/").status_code == 404
        assert self.client.post(f"{other}{self.shared.pk}/edit/", {"value": "{}"}).status_code == 404
        self.client.post(f"{other}delete/", {"ids": [str(self.shared.pk)], "confirmed": "on"})
        assert StoreItem.objects.filter(pk=self.shared.pk).exists()
        listing = self.client.get(other)
        assert b"secret" in listing.content and b"city" not in listing.content
