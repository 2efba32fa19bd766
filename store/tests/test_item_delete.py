"""Deleting an item through the item route whatever its namespace and key.

The delete's audit event named the item by "namespace/key", and the audit
trail's entity id holds 64 characters, so deleting ("memories", "user-<uuid>") / "favourite-food"
answered 400 "A value does not fit what can be stored" and left the item in place.
"""

from core.models import AuditEvent
from core.testing import MemoryTestCase
from store.models import StoreItem
from store.services import store_item_delete
from store.tests.factories import make_item

ITEM = "/api/v1/store/item/"
PERSON = "user-3fa85f64-5717-4562-b3fc-2c963f66afa6"


class StoreItemDeleteTests(MemoryTestCase):
    def test_an_item_with_a_long_namespace_and_key_is_deleted_and_audited(self):
        item = make_item(workspace=self.workspace, namespace=("memories", PERSON), key="favourite-food")
        response = self.api().delete(f"{ITEM}?namespace=memories.{PERSON}&key=favourite-food")
        assert response.status_code == 204, response.content
        assert not StoreItem.objects.exists()
        event = AuditEvent.objects.get(entity_type="store_item", action="delete")
        assert event.entity_id == str(item.pk)
        assert event.changes["namespace"] == ["memories", PERSON]
        assert event.changes["key"] == "favourite-food"

    def test_the_service_deletes_in_the_named_partition_only(self):
        make_item(workspace=self.workspace, namespace=("memories", PERSON), key="k" * 300)
        mine = make_item(
            workspace=self.workspace, agent=self.agent, namespace=("memories", PERSON), key="k" * 300
        )
        deleted = store_item_delete(
            workspace=self.workspace,
            agent=self.agent,
            namespace=("memories", PERSON),
            key="k" * 300,
            actor="t",
        )
        assert deleted == 1
        assert not StoreItem.objects.filter(pk=mine.pk).exists()
        assert StoreItem.objects.filter(agent=None).count() == 1
        assert AuditEvent.objects.get(action="delete").changes["agent"] == "assistant"
