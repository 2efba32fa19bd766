"""Two batches writing the same items at once.

A batch's puts locked their items in the order the ops came in, so two
batches putting the same two items in opposite orders ([a, b] and [b, a], both legitimate
LangGraph batches) could each hold one item and wait for the other: PostgreSQL broke the
deadlock by failing one of them, which the API reports as a 503.
"""

import threading
from unittest.mock import patch

from django.test import TransactionTestCase

from core.services import workspace_create
from core.testing import thread_started, until_a_backend_waits
from store import services
from store.models import StoreItem
from store.services import put_request_clean, store_puts_apply
from store.tests.factories import make_item


def puts(*keys, text):
    return [
        put_request_clean(namespace=("memories",), key=key, value={"text": text}, index=False) for key in keys
    ]


class StorePutRaceTests(TransactionTestCase):
    def test_batches_putting_the_same_items_in_opposite_orders_both_commit(self):
        workspace = workspace_create(name="Acme")
        for key in ("a", "b"):
            make_item(workspace=workspace, agent=None, namespace=("memories",), key=key, index=False)
        first_locked, release = threading.Event(), threading.Event()
        upsert = services._upsert
        first = threading.local()

        def pausing_upsert(**kwargs):
            result = upsert(**kwargs)
            # The first batch stops once it holds its first item, until the second waits on it.
            if getattr(first, "pause", False) and not first_locked.is_set():
                first_locked.set()
                release.wait(30)
            return result

        def first_batch():
            first.pause = True
            store_puts_apply(workspace=workspace, agent=None, puts=puts("a", "b", text="first"))

        def second_batch():
            store_puts_apply(workspace=workspace, agent=None, puts=puts("b", "a", text="second"))

        errors: list[BaseException] = []
        with patch.object(services, "_upsert", pausing_upsert):
            one = thread_started(first_batch, errors)
            assert first_locked.wait(30)
            two = thread_started(second_batch, errors)
            until_a_backend_waits()
            release.set()
            one.join(30)
            two.join(30)

        assert errors == []
        # The second batch waited for the first: its values are the ones left.
        assert dict(StoreItem.objects.values_list("key", "value")) == {
            "a": {"text": "second"},
            "b": {"text": "second"},
        }


class StoreRefreshRaceTests(TransactionTestCase):
    def test_batches_reading_one_item_and_putting_the_other_both_commit(self):
        """[get x, put y] beside [get y, put x]: each get refreshes its item's TTL. Refreshed in
        the puts' transaction, each batch held the item it read while waiting for the one it
        wrote, and PostgreSQL failed one of them as a deadlock."""
        workspace = workspace_create(name="Acme")
        for key in ("x", "y"):
            make_item(workspace=workspace, agent=None, namespace=("memories",), key=key, index=False, ttl=60)
        refreshed, release = threading.Event(), threading.Event()
        refresh = services.store_items_refresh_ttl
        first = threading.local()

        def pausing_refresh(**kwargs):
            result = refresh(**kwargs)
            if getattr(first, "pause", False):
                refreshed.set()
                release.wait(30)
            return result

        def batch(read, written, *, pause=False):
            first.pause = pause
            services.store_batch(
                workspace=workspace,
                agent=None,
                ops=[
                    services.GetRequest(namespace=("memories",), key=read),
                    *puts(written, text=f"after reading {read}"),
                ],
            )

        errors: list[BaseException] = []
        with patch.object(services, "store_items_refresh_ttl", pausing_refresh):
            one = thread_started(lambda: batch("x", "y", pause=True), errors)
            assert refreshed.wait(30)
            two = thread_started(lambda: batch("y", "x"), errors)
            # Done at once when the first batch holds nothing; else waiting on its lock.
            two.join(5)
            release.set()
            one.join(30)
            two.join(30)

        assert errors == []
        assert dict(StoreItem.objects.values_list("key", "value")) == {
            "x": {"text": "after reading y"},
            "y": {"text": "after reading x"},
        }
