"""Namespaces and keys at the edges of what a put accepts.

A put whose labels and key were long and varied (16 random labels of 255
characters, a 512-character key) answered 503 "database unavailable, retry shortly" (the
unique index refused the row as too large for a B-tree entry), so a client retried a request
that can never succeed; and an item put with five 255-character labels could not be read or
deleted through the item route, whose query parameter stopped at 1,020 characters.
"""

import random
import string

from django.conf import settings

from core.testing import MemoryTestCase
from store.models import StoreItem
from store.services import NAMESPACE_KEY_TOO_LONG

ITEM = "/api/v1/store/item/"
BATCH = "/api/v1/store/batch/"


def varied(length: int, seed: int) -> str:
    # Random text: PostgreSQL cannot compress it below the index's entry limit.
    chooser = random.Random(seed)
    return "".join(chooser.choice(string.ascii_letters + string.digits) for _ in range(length))


class StoreNamespaceSizeTests(MemoryTestCase):
    def test_a_namespace_and_key_too_large_to_index_are_a_400_naming_the_field(self):
        depth = settings.STORE_NAMESPACE_MAX_DEPTH
        labels = [varied(255, n) for n in range(depth)]
        body = {"namespace": labels, "key": varied(512, 99), "value": {"text": "x"}}
        response = self.api().put(ITEM, body, format="json")
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["fields"]["namespace"] == [NAMESPACE_KEY_TOO_LONG]
        op = {"op": "put", **body}
        response = self.api().post(BATCH, {"ops": [op]}, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["message"] == NAMESPACE_KEY_TOO_LONG
        assert not StoreItem.objects.exists()

    def test_an_item_with_long_labels_is_read_and_deleted_through_the_item_route(self):
        labels = [varied(255, n) for n in range(5)]
        body = {"namespace": labels, "key": "k", "value": {"text": "Ada"}}
        assert self.api().put(ITEM, body, format="json").status_code == 201
        query = {"namespace": ".".join(labels), "key": "k"}
        got = self.api().get(ITEM, query)
        assert got.status_code == 200, got.content
        assert got.json()["namespace"] == labels
        deleted = self.api().delete(f"{ITEM}?namespace={query['namespace']}&key=k")
        assert deleted.status_code == 204, deleted.content
        assert not StoreItem.objects.exists()
