"""MemoryServerStore against a live server: LangGraph's store contract, sync and async.

The assertions follow those of LangGraph's own InMemoryStore tests that apply to a store
with server-side embeddings (no conformance suite for stores ships with LangGraph or on
PyPI): batch ordering, put/get/delete, search with filters and pages, namespace listing
with prefix, suffix, wildcards, depth and pages, semantic search over indexed fields,
and TTL.
"""

import asyncio
import time

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    PutOp,
    SearchItem,
    SearchOp,
)

from memory_client.store import MemoryServerStore

pytestmark = pytest.mark.slow


@pytest.fixture
def store(live_server_url, workspace_keys):
    with MemoryServerStore(live_server_url, workspace_keys["key"], timeout=180) as store:
        yield store


def test_batch_results_follow_the_ops_and_reads_precede_puts(store):
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key3", {"data": "value3"}),
            SearchOp(("test",), filter={"data": "value1"}),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(("test",), "key4"),
            GetOp(("test", "bar"), "key3"),
        ]
    )
    assert len(results) == 6
    assert isinstance(results[0], Item)
    assert results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert [item.key for item in results[2]] == ["key1"]
    assert isinstance(results[2][0], SearchItem)
    assert set(results[3]) == {("test", "foo"), ("test", "bar")}
    assert results[4] is None
    # Puts of a batch land after its reads, as in LangGraph's stores.
    assert results[5] is None
    assert store.get(("test", "bar"), "key3").value == {"data": "value3"}


def test_put_get_update_delete(store):
    namespace = ("users", "ada")
    assert store.get(namespace, "profile") is None
    store.put(namespace, "profile", {"name": "Ada", "langs": ["pt", "en"], "city": "Lisboa ☀️"})
    first = store.get(namespace, "profile")
    assert first.value == {"name": "Ada", "langs": ["pt", "en"], "city": "Lisboa ☀️"}
    assert first.created_at == first.updated_at or first.created_at <= first.updated_at
    time.sleep(0.01)
    store.put(namespace, "profile", {"name": "Ada L."})
    second = store.get(namespace, "profile")
    assert second.value == {"name": "Ada L."}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.delete(namespace, "profile")
    assert store.get(namespace, "profile") is None
    store.delete(namespace, "profile")  # deleting what is gone is no error


def test_invalid_namespaces_are_refused(store):
    for namespace in [(), ("a.b",), ("a", ""), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("x.y",), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.search(("a.b",))


def test_search_filters_and_pages(store):
    docs = [
        ("doc1", {"title": "One", "score": 4.5, "kind": "report", "tags": ["a"]}),
        ("doc2", {"title": "Two", "score": 5.5, "kind": "report", "tags": ["b"]}),
        ("doc3", {"title": "Three", "score": 3.0, "kind": "memo", "tags": ["a"]}),
    ]
    for key, value in docs:
        store.put(("docs", "2026"), key, value)
    store.put(("other",), "doc4", {"title": "Four", "kind": "report"})

    assert len(store.search(("docs",))) == 3
    assert len(store.search(())) == 4
    assert {i.key for i in store.search(("docs",), filter={"kind": "report"})} == {"doc1", "doc2"}
    assert {i.key for i in store.search(("docs",), filter={"score": {"$gt": 4.0}})} == {"doc1", "doc2"}
    assert {i.key for i in store.search(("docs",), filter={"score": {"$lte": 4.5}})} == {"doc1", "doc3"}
    assert {i.key for i in store.search(("docs",), filter={"kind": {"$ne": "report"}})} == {"doc3"}
    assert {i.key for i in store.search(("docs",), filter={"tags": ["a"]})} == {"doc1", "doc3"}
    both = store.search(("docs",), filter={"kind": "report", "score": {"$lt": 5}})
    assert [i.key for i in both] == ["doc1"]
    first, second = store.search(("docs",), limit=2), store.search(("docs",), limit=2, offset=2)
    assert len(first) == 2 and len(second) == 1
    assert {i.key for i in first + second} == {"doc1", "doc2", "doc3"}
    assert all(i.score is None for i in first)


def test_list_namespaces_with_conditions_depth_and_pages(store):
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]
    store.batch([PutOp(namespace, f"id_{i}", {"i": i}) for i, namespace in enumerate(namespaces)])
    assert store.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("users",)) == [("users", "123"), ("users", "456", "settings")]
    assert store.list_namespaces(prefix=("nope",)) == []
    every = store.list_namespaces(limit=100)
    assert every == sorted(namespaces)
    assert store.list_namespaces(limit=3, offset=2) == every[2:5]
    store.delete(("a", "b", "c"), "id_0")
    assert ("a", "b", "c") not in store.list_namespaces(prefix=("a",))


def test_semantic_search_over_indexed_fields(live_server_url, workspace_keys):
    store = MemoryServerStore(
        live_server_url, workspace_keys["key"], index={"dims": 384, "embed": "server", "fields": ["text"]}
    )
    notes = {
        "tea": {"text": "Ada drinks green tea every morning.", "kind": "taste"},
        "city": {"text": "Ada moved to Lisbon last spring.", "kind": "place"},
        "cat": {"text": "Ada has a cat named Miso.", "kind": "pet"},
        "hidden": {"text": "Ada adopted a kitten called Miso.", "kind": "pet"},
    }
    for key, value in notes.items():
        store.put(("memories", "ada"), key, value, index=False if key == "hidden" else None)
    hits = store.search(("memories",), query="where does she live now?")
    assert hits[0].key == "city" and hits[0].score is not None
    pets = store.search(("memories",), query="animal at home", filter={"kind": "pet"})
    # The item put with index=False is still found, unscored, after the scored ones.
    assert [hit.key for hit in pets] == ["cat", "hidden"]
    assert pets[0].score is not None and pets[1].score is None
    # Re-putting with other text re-embeds: the old meaning no longer matches first.
    store.put(("memories", "ada"), "city", {"text": "Ada plays the cello on Sundays.", "kind": "hobby"})
    assert store.search(("memories",), query="music instrument", limit=1)[0].key == "city"
    page = store.search(("memories",), query="Ada", limit=2, offset=2)
    assert len(page) == 2
    store.close()


def test_ttl_expires_and_reads_refresh(live_server_url, workspace_keys):
    from store.models import StoreItem

    store = MemoryServerStore(
        live_server_url, workspace_keys["key"], ttl={"default_ttl": 10, "refresh_on_read": True}
    )
    store.put(("cache",), "a", {"v": 1})
    store.put(("cache",), "b", {"v": 2}, ttl=None)
    a = StoreItem.objects.get(workspace=workspace_keys["workspace"], key="a")
    assert a.ttl_minutes == 10 and a.expires_at is not None
    assert StoreItem.objects.get(workspace=workspace_keys["workspace"], key="b").expires_at is None
    before = a.expires_at
    time.sleep(0.05)
    store.get(("cache",), "a")
    refreshed = StoreItem.objects.get(pk=a.pk).expires_at
    assert refreshed > before
    store.get(("cache",), "a", refresh_ttl=False)
    assert StoreItem.objects.get(pk=a.pk).expires_at == refreshed
    # Past its expiry an item is gone for every read, before the sweep deletes it.
    from datetime import timedelta

    from django.utils import timezone

    StoreItem.objects.filter(pk=a.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert store.get(("cache",), "a") is None
    assert [item.key for item in store.search(("cache",))] == ["b"]
    store.close()


def test_partitions_agent_keys_and_outsiders(live_server_url, workspace_keys):
    shared = MemoryServerStore(live_server_url, workspace_keys["key"])
    named = MemoryServerStore(live_server_url, workspace_keys["key"], agent="assistant")
    bound = MemoryServerStore(live_server_url, workspace_keys["agent_key"])
    shared.put(("prefs",), "tone", {"v": "formal"})
    bound.put(("prefs",), "tone", {"v": "casual"})
    assert shared.get(("prefs",), "tone").value == {"v": "formal"}
    assert named.get(("prefs",), "tone").value == {"v": "casual"}

    from core.services import api_key_create, workspace_create

    _, outsider_key = api_key_create(workspace=workspace_create(name="store-outsider"))
    outsider = MemoryServerStore(live_server_url, outsider_key)
    assert outsider.get(("prefs",), "tone") is None
    assert outsider.search(()) == []
    outsider.delete(("prefs",), "tone")
    assert shared.get(("prefs",), "tone") is not None

    reader = MemoryServerStore(live_server_url, workspace_keys["read_only_key"])
    assert reader.get(("prefs",), "tone").value == {"v": "formal"}
    from memory_client import PermissionDeniedError

    with pytest.raises(PermissionDeniedError):
        reader.put(("prefs",), "tone", {"v": "rude"})
    for s in (shared, named, bound, outsider, reader):
        s.close()


def test_async_api(live_server_url, workspace_keys):
    async def scenario():
        store = MemoryServerStore(live_server_url, workspace_keys["key"])
        await store.aput(("async", "ada"), "k1", {"text": "Ada likes jazz."})
        await store.aput(("async", "bo"), "k2", {"text": "Bo likes rock."})
        item = await store.aget(("async", "ada"), "k1")
        hits = await store.asearch(("async",), query="jazz music")
        namespaces = await store.alist_namespaces(prefix=("async",))
        results = await store.abatch([GetOp(("async", "bo"), "k2"), PutOp(("async", "bo"), "k2", None)])
        gone = await store.aget(("async", "bo"), "k2")
        await store.adelete(("async", "ada"), "k1")
        left = await store.asearch(("async",))
        await store.aclose()
        return item, hits, namespaces, results, gone, left

    item, hits, namespaces, results, gone, left = asyncio.run(scenario())
    assert item.value == {"text": "Ada likes jazz."}
    assert hits[0].key == "k1"
    assert namespaces == [("async", "ada"), ("async", "bo")]
    assert results[0].value == {"text": "Bo likes rock."} and results[1] is None
    assert gone is None and left == []
