from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from store.models import StoreItem
from store.selectors import store_item_get, store_item_search, store_namespaces_list
from store.services import GetRequest, SearchRequest, store_batch, store_items_sweep_expired
from store.tests.factories import make_item


class StoreTtlTests(MemoryTestCase):
    def _age(self, minutes):
        """Move every item's expiry `minutes` into the past."""
        StoreItem.objects.update(expires_at=timezone.now() - timedelta(minutes=minutes))

    def test_expired_items_are_not_read_before_the_sweep(self):
        make_item(workspace=self.workspace, ttl=1)
        self._age(1)
        assert (
            store_item_get(workspace=self.workspace, agent=None, namespace=("memories", "ada"), key="k1")
            is None
        )
        assert store_item_search(workspace=self.workspace, agent=None) == []
        assert store_namespaces_list(workspace=self.workspace, agent=None) == []

    def test_reads_refresh_the_ttl_unless_told_not_to(self):
        make_item(workspace=self.workspace, key="a", ttl=10)
        make_item(workspace=self.workspace, key="b", ttl=10)
        make_item(workspace=self.workspace, key="forever")
        soon = timezone.now() + timedelta(minutes=1)
        StoreItem.objects.filter(ttl_minutes__isnull=False).update(expires_at=soon)
        store_batch(
            workspace=self.workspace,
            agent=None,
            ops=[
                GetRequest(namespace=("memories", "ada"), key="a"),
                GetRequest(namespace=("memories", "ada"), key="b", refresh_ttl=False),
            ],
        )
        expiry = dict(StoreItem.objects.values_list("key", "expires_at"))
        assert expiry["a"] > timezone.now() + timedelta(minutes=9)
        assert expiry["b"] == soon
        assert expiry["forever"] is None
        store_batch(workspace=self.workspace, agent=None, ops=[SearchRequest(namespace_prefix=("memories",))])
        assert StoreItem.objects.get(key="b").expires_at > timezone.now() + timedelta(minutes=9)

    def test_the_sweep_deletes_only_expired_items(self):
        make_item(workspace=self.workspace, key="old", ttl=1)
        self._age(1)
        make_item(workspace=self.workspace, key="young", ttl=60)
        make_item(workspace=self.workspace, key="forever")
        assert store_items_sweep_expired() == 1
        assert set(StoreItem.objects.values_list("key", flat=True)) == {"young", "forever"}
