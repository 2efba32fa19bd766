from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from core.errors import ApplicationError
from core.testing import MemoryTestCase
from core.testing_embeddings import RacingEmbeddingProvider
from store.models import StoreItem, StoreItemEmbedding
from store.services import (
    NAMESPACE_EMPTY,
    NAMESPACE_LABEL_INVALID,
    NAMESPACE_RESERVED,
    VALUE_TOO_LARGE,
    store_item_put,
    store_items_embed,
)
from store.tests.factories import make_item


class StoreItemPutTests(MemoryTestCase):
    def test_put_again_replaces_the_value_in_place(self):
        """The same (namespace, key) in one partition is one item; created_at stays."""
        first = make_item(workspace=self.workspace, value={"text": "one"})
        second, created = store_item_put(
            workspace=self.workspace,
            agent=None,
            namespace=("memories", "ada"),
            key="k1",
            value={"text": "two"},
        )
        assert not created
        assert second.pk == first.pk
        stored = StoreItem.objects.get()
        assert stored.value == {"text": "two"}
        assert stored.created_at == first.created_at
        assert stored.updated_at > first.updated_at

    def test_partitions_are_separate(self):
        """The workspace's and each agent's partition hold their own item at one place."""
        make_item(workspace=self.workspace)
        make_item(workspace=self.workspace, agent=self.agent)
        make_item(workspace=self.workspace, agent=self.other_agent)
        make_item(workspace=self.other_workspace)
        assert StoreItem.objects.count() == 4

    def test_index_selects_the_text_that_is_searched(self):
        value = {"title": "Trip", "notes": [{"text": "Porto"}, {"text": "Lisbon"}], "n": 3}
        whole = make_item(workspace=self.workspace, key="whole", value=value)
        fields = make_item(workspace=self.workspace, key="fields", value=value, index=["notes[*].text", "n"])
        last = make_item(
            workspace=self.workspace, key="last", value=value, index=["notes[-1].text", "missing"]
        )
        off = make_item(workspace=self.workspace, key="off", value=value, index=False)
        assert '"title": "Trip"' in whole.search_text
        assert fields.search_text == "Porto\nLisbon\n3"
        assert last.search_text == "Lisbon"
        assert off.search_text == "" and off.index_fields == []

    def test_hostile_namespaces_and_values_are_refused(self):
        cases = [
            ((), NAMESPACE_EMPTY),
            (("a.b",), NAMESPACE_LABEL_INVALID),
            (("a", ""), NAMESPACE_LABEL_INVALID),
            (("a\x00",), NAMESPACE_LABEL_INVALID),
            (("a", 3), NAMESPACE_LABEL_INVALID),
            (("langgraph", "x"), NAMESPACE_RESERVED),
        ]
        for namespace, message in cases:
            with self.subTest(namespace=namespace), self.assertRaisesMessage(ApplicationError, message):
                store_item_put(workspace=self.workspace, agent=None, namespace=namespace, key="k", value={})
        for bad in (["x"], "text", None):
            with self.subTest(value=bad), self.assertRaises(ApplicationError):
                store_item_put(workspace=self.workspace, agent=None, namespace=("a",), key="k", value=bad)
        for bad in (0, -1, float("inf"), True, "5"):
            with self.subTest(ttl=bad), self.assertRaises(ApplicationError):
                store_item_put(
                    workspace=self.workspace, agent=None, namespace=("a",), key="k", value={}, ttl=bad
                )
        for bad in ([""], ["a..b"], "$", [1]):
            with self.subTest(index=bad), self.assertRaises(ApplicationError):
                store_item_put(
                    workspace=self.workspace, agent=None, namespace=("a",), key="k", value={}, index=bad
                )
        assert not StoreItem.objects.exists()

    @override_settings(STORE_VALUE_MAX_BYTES=100)
    def test_a_value_over_the_limit_is_413(self):
        with self.assertRaisesMessage(ApplicationError, VALUE_TOO_LARGE.format(limit=100)) as caught:
            store_item_put(
                workspace=self.workspace, agent=None, namespace=("a",), key="k", value={"t": "x" * 200}
            )
        assert caught.exception.status_code == 413

    def test_ttl_sets_the_expiry_and_a_put_without_ttl_clears_it(self):
        before = timezone.now()
        item = make_item(workspace=self.workspace, ttl=30)
        assert item.ttl_minutes == 30
        assert before + timedelta(minutes=30) <= item.expires_at <= timezone.now() + timedelta(minutes=30)
        make_item(workspace=self.workspace)
        stored = StoreItem.objects.get()
        assert stored.ttl_minutes is None and stored.expires_at is None

    def test_the_vector_survives_a_put_with_the_same_indexed_text_only(self):
        provider = RacingEmbeddingProvider()
        item = make_item(workspace=self.workspace, value={"text": "Lisbon", "count": 1}, index=["text"])
        assert store_items_embed(item_ids=[item.pk], provider=provider) == 1
        assert store_items_embed(item_ids=[item.pk], provider=provider) == 0
        make_item(workspace=self.workspace, value={"text": "Lisbon", "count": 2}, index=["text"])
        assert StoreItemEmbedding.objects.count() == 1
        assert StoreItem.objects.get().embedding_model == provider.model_name
        make_item(workspace=self.workspace, value={"text": "Porto", "count": 2}, index=["text"])
        assert StoreItemEmbedding.objects.count() == 0
        assert StoreItem.objects.get().embedding_model == ""

    def test_an_item_edited_while_embedding_keeps_no_stale_vector(self):
        item = make_item(workspace=self.workspace, value={"text": "Lisbon"})

        def edit():
            make_item(workspace=self.workspace, value={"text": "Porto"})

        store_items_embed(item_ids=[item.pk], provider=RacingEmbeddingProvider(during=edit))
        assert not StoreItemEmbedding.objects.exists()

    def test_a_put_queues_its_embedding_on_commit(self):
        with self.captureOnCommitCallbacks(execute=True) as callbacks:
            make_item(workspace=self.workspace, value={"text": "Ada likes tea."})
        assert len(callbacks) == 1
        item = StoreItem.objects.get()
        assert item.embedding_model
        assert StoreItemEmbedding.objects.filter(item=item).count() == 1

    def test_not_indexed_items_queue_nothing(self):
        with self.captureOnCommitCallbacks() as callbacks:
            make_item(workspace=self.workspace, index=False)
        assert callbacks == []


class StoreEmbedSweepTests(MemoryTestCase):
    def test_the_periodic_sweep_embeds_items_a_lost_task_left(self):
        from runtime.tasks import embeddings_sweep_task

        indexed = make_item(workspace=self.workspace, key="indexed")
        make_item(workspace=self.workspace, key="off", index=False)
        written = embeddings_sweep_task.apply(kwargs={"grace_seconds": 0}).get()
        assert written.get("store_items") == 1
        assert StoreItemEmbedding.objects.get().item_id == indexed.pk
        assert embeddings_sweep_task.apply(kwargs={"grace_seconds": 0}).get().get("store_items") is None
