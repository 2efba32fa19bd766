from django.test import override_settings

from core.models import AuditEvent
from core.testing import MemoryTestCase
from identities.services import memory_user_create, memory_user_erase, memory_user_merge
from store.models import StoreItem
from store.tests.factories import make_item

ITEM = "/api/v1/store/item/"
SEARCH = "/api/v1/store/search/"
NAMESPACES = "/api/v1/store/namespaces/"
BATCH = "/api/v1/store/batch/"


def put_body(**extra):
    return {
        "namespace": ["memories", "ada"],
        "key": "city",
        "value": {"text": "Ada lives in Lisbon."},
        **extra,
    }


class StoreItemApiTests(MemoryTestCase):
    def test_put_get_delete(self):
        created = self.api().put(ITEM, put_body(), format="json")
        assert created.status_code == 201, created.content
        body = created.json()
        assert body["namespace"] == ["memories", "ada"] and body["key"] == "city"
        assert body["value"] == {"text": "Ada lives in Lisbon."}
        assert body["expires_at"] is None
        assert self.api().put(ITEM, put_body(value={"text": "Porto"}), format="json").status_code == 200
        got = self.api().get(ITEM, {"namespace": "memories.ada", "key": "city"})
        assert got.status_code == 200 and got.json()["value"] == {"text": "Porto"}
        assert self.api().delete(f"{ITEM}?namespace=memories.ada&key=city").status_code == 204
        assert self.api().get(ITEM, {"namespace": "memories.ada", "key": "city"}).status_code == 404
        # Deleting what is gone is not an error, as in LangGraph.
        assert self.api().delete(f"{ITEM}?namespace=memories.ada&key=city").status_code == 204
        assert AuditEvent.objects.filter(entity_type="store_item", action="delete").count() == 1

    def test_an_agent_bound_key_acts_in_its_own_partition_only(self):
        make_item(workspace=self.workspace, agent=self.other_agent, key="theirs")
        make_item(workspace=self.workspace, key="shared")
        agent_api = self.api(self.agent_key)
        assert agent_api.put(ITEM, put_body(key="mine"), format="json").status_code == 201
        assert StoreItem.objects.get(key="mine").agent == self.agent
        for key in ("theirs", "shared"):
            assert agent_api.get(ITEM, {"namespace": "memories.ada", "key": key}).status_code == 404
            agent_api.delete(f"{ITEM}?namespace=memories.ada&key={key}")
        named = agent_api.get(ITEM, {"namespace": "memories.ada", "key": "theirs", "agent": "researcher"})
        assert named.status_code == 404
        assert StoreItem.objects.count() == 3
        found = agent_api.post(SEARCH, {"namespace_prefix": ["memories"]}, format="json").json()["items"]
        assert [hit["key"] for hit in found] == ["mine"]
        # The workspace key reaches an agent's partition by naming it.
        named = self.api().get(ITEM, {"namespace": "memories.ada", "key": "mine", "agent": "assistant"})
        assert named.status_code == 200

    def test_another_workspace_sees_nothing(self):
        make_item(workspace=self.workspace, key="city")
        outsider = self.api(self.outsider_key)
        assert outsider.get(ITEM, {"namespace": "memories.ada", "key": "city"}).status_code == 404
        assert outsider.post(SEARCH, {}, format="json").json() == {"items": []}
        assert outsider.post(NAMESPACES, {}, format="json").json() == {"namespaces": []}
        outsider.delete(f"{ITEM}?namespace=memories.ada&key=city")
        assert StoreItem.objects.filter(workspace=self.workspace).count() == 1
        assert outsider.get("/api/v1/store/items/").json()["results"] == []

    def test_a_read_only_key_reads_but_never_writes(self):
        make_item(workspace=self.workspace, key="city", ttl=5)
        expires = StoreItem.objects.get().expires_at
        reader = self.api(self.read_only_key)
        assert reader.get(ITEM, {"namespace": "memories.ada", "key": "city"}).status_code == 200
        assert reader.post(SEARCH, {}, format="json").status_code == 200
        assert (
            reader.post(BATCH, {"ops": [{"op": "search", "namespace_prefix": []}]}, format="json").status_code
            == 200
        )
        assert StoreItem.objects.get().expires_at == expires
        assert reader.put(ITEM, put_body(), format="json").status_code == 403
        put_op = {"op": "put", "namespace": ["a"], "key": "k", "value": {}}
        assert reader.post(BATCH, {"ops": [put_op]}, format="json").status_code == 403
        assert reader.delete(f"{ITEM}?namespace=memories.ada&key=city").status_code == 403

    def test_hostile_input_answers_400_with_the_error_body(self):
        bad_bodies = [
            put_body(namespace=[]),
            put_body(namespace=["a.b"]),
            put_body(namespace=[""]),
            put_body(namespace=["langgraph"]),
            put_body(namespace="memories"),
            put_body(namespace=[1]),
            put_body(value=["not", "an", "object"]),
            put_body(value="text"),
            put_body(key=""),
            put_body(key="k" * 513),
            put_body(ttl=-1),
            put_body(index="$"),
            put_body(index=["a..b"]),
            put_body(extra=1),
            put_body(memory_user="00000000-0000-0000-0000-000000000000"),
        ]
        for body in bad_bodies:
            with self.subTest(body=body):
                response = self.api().put(ITEM, body, format="json")
                assert response.status_code in (400, 404), response.content
                assert set(response.json()["error"]) >= {"code", "message"}
        for query in ({"namespace": "", "key": "k"}, {"namespace": "a..b", "key": "k"}, {"key": "k"}):
            with self.subTest(query=query):
                assert self.api().get(ITEM, query).status_code == 400
        bad_searches = [
            {"filter": {"score": {"$regex": "x"}}},
            {"filter": ["x"]},
            {"namespace_prefix": ["a.b"]},
            {"limit": -1},
            {"limit": 10**9},
        ]
        for body in bad_searches:
            with self.subTest(search=body):
                assert self.api().post(SEARCH, body, format="json").status_code == 400
        bad_ops = [
            {"op": "drop"},
            {"op": "get", "namespace": ["a"]},
            {"op": "put", "namespace": [], "key": "k", "value": {}},
            "x",
        ]
        for op in bad_ops:
            with self.subTest(op=op):
                response = self.api().post(BATCH, {"ops": [op]}, format="json")
                assert response.status_code == 400, response.content
        assert not StoreItem.objects.exists()

    @override_settings(STORE_VALUE_MAX_BYTES=1000)
    def test_a_huge_value_is_413(self):
        response = self.api().put(ITEM, put_body(value={"text": "x" * 2000}), format="json")
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"

    def test_memory_user_items_follow_merge_and_erase(self):
        ada = memory_user_create(workspace=self.workspace, canonical_id="email:ada@example.com")
        twin = memory_user_create(workspace=self.workspace, canonical_id="email:ada2@example.com")
        response = self.api().put(ITEM, put_body(memory_user=str(twin.pk)), format="json")
        assert response.status_code == 201
        memory_user_merge(source=twin, target=ada, actor="test")
        assert StoreItem.objects.get().memory_user == ada
        memory_user_erase(memory_user=ada, actor="test")
        assert not StoreItem.objects.exists()

    def test_another_workspaces_memory_user_is_not_found(self):
        stranger = memory_user_create(workspace=self.other_workspace, canonical_id="email:x@example.com")
        response = self.api().put(ITEM, put_body(memory_user=str(stranger.pk)), format="json")
        assert response.status_code == 404
        assert not StoreItem.objects.exists()


class StoreSearchApiTests(MemoryTestCase):
    def test_search_with_filter_query_and_wait(self):
        for key, text, kind in [
            ("tea", "Ada prefers green tea.", "taste"),
            ("city", "Ada moved to Lisbon.", "place"),
            ("cat", "Ada has a cat named Miso.", "pet"),
        ]:
            body = put_body(key=key, value={"text": text, "kind": kind}, index=["text"], wait=True)
            assert self.api().put(ITEM, body, format="json").status_code == 201
        assert StoreItem.objects.exclude(embedding_model="").count() == 3
        hits = (
            self.api()
            .post(SEARCH, {"namespace_prefix": ["memories"], "query": "kitten"}, format="json")
            .json()["items"]
        )
        assert hits[0]["key"] == "cat" and isinstance(hits[0]["score"], float)
        only = {"namespace_prefix": ["memories"], "filter": {"kind": {"$ne": "pet"}}, "query": "kitten"}
        assert "cat" not in [
            hit["key"] for hit in self.api().post(SEARCH, only, format="json").json()["items"]
        ]

    def test_namespaces(self):
        for namespace in (["a", "b"], ["a", "c", "d"], ["z"]):
            self.api().put(ITEM, put_body(namespace=namespace), format="json")
        listed = self.api().post(
            NAMESPACES,
            {"match_conditions": [{"match_type": "prefix", "path": ["a"]}], "max_depth": 2},
            format="json",
        )
        assert listed.json() == {"namespaces": [["a", "b"], ["a", "c"]]}


class StoreBatchApiTests(MemoryTestCase):
    def test_reads_see_the_store_before_the_batchs_puts(self):
        make_item(workspace=self.workspace, namespace=("n",), key="old", value={"v": 1})
        ops = [
            {"op": "put", "namespace": ["n"], "key": "new", "value": {"v": 2}},
            {"op": "get", "namespace": ["n"], "key": "new"},
            {"op": "get", "namespace": ["n"], "key": "old"},
            {"op": "put", "namespace": ["n"], "key": "old", "value": None},
            {"op": "search", "namespace_prefix": ["n"]},
            {"op": "list_namespaces"},
            {"op": "put", "namespace": ["n"], "key": "new", "value": {"v": 3}},
        ]
        response = self.api().post(BATCH, {"ops": ops}, format="json")
        assert response.status_code == 200, response.content
        results = response.json()["results"]
        assert results[0] is None and results[1] is None
        assert results[2]["value"] == {"v": 1}
        assert [hit["key"] for hit in results[4]] == ["old"]
        assert results[5] == [["n"]]
        assert results[6] is None
        assert dict(StoreItem.objects.values_list("key", "value")) == {"new": {"v": 3}}
