import json

from django.contrib.auth import get_user_model

from core.models import AuditEvent
from core.testing import MemoryTestCase
from store.models import StoreItem
from store.tests.factories import make_item


class StoreAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
        self.client.force_login(self.superuser)
        self.item = make_item(workspace=self.workspace, agent=self.agent)

    def test_editing_the_value_goes_through_the_service(self):
        url = f"/admin/store/storeitem/{self.item.pk}/change/"
        assert self.client.get(url).status_code == 200
        refused = self.client.post(url, {"value": "[1]"})
        assert refused.status_code == 200 and b"must be a JSON object" in refused.content
        saved = self.client.post(url, {"value": json.dumps({"text": "Ada lives in Porto."})})
        assert saved.status_code == 302
        item = StoreItem.objects.get()
        assert item.value == {"text": "Ada lives in Porto."} and "Porto" in item.search_text
        assert AuditEvent.objects.filter(entity_type="store_item", action="update").exists()

    def test_the_delete_action_is_audited(self):
        response = self.client.post(
            "/admin/store/storeitem/", {"action": "delete_items", "_selected_action": [str(self.item.pk)]}
        )
        assert response.status_code == 302
        assert not StoreItem.objects.exists()
        assert AuditEvent.objects.filter(entity_type="store_item", action="delete").count() == 1
