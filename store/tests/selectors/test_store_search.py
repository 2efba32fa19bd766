from datetime import timedelta
from unittest.mock import patch

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.errors import ApplicationError
from core.testing import MemoryTestCase, bitmap_only_plan
from store.filters import value_filter_pairs
from store.models import StoreItem
from store.selectors import store_item_search, store_namespaces_list
from store.services import store_items_embed
from store.tests.factories import make_item


def keys(hits):
    return [item.key for item, _score in hits]


class StoreSearchTests(MemoryTestCase):
    def test_a_prefix_matches_whole_labels_only(self):
        make_item(workspace=self.workspace, namespace=("docs",), key="root")
        make_item(workspace=self.workspace, namespace=("docs", "a"), key="deep")
        make_item(workspace=self.workspace, namespace=("docsx",), key="sibling")
        make_item(workspace=self.workspace, namespace=("docs a",), key="space")
        found = keys(store_item_search(workspace=self.workspace, agent=None, namespace_prefix=("docs",)))
        assert sorted(found) == ["deep", "root"]
        assert len(store_item_search(workspace=self.workspace, agent=None, namespace_prefix=())) == 4

    def test_search_stays_in_its_partition(self):
        make_item(workspace=self.workspace, key="shared")
        make_item(workspace=self.workspace, agent=self.agent, key="mine")
        make_item(workspace=self.workspace, agent=self.other_agent, key="theirs")
        make_item(workspace=self.other_workspace, key="outside")
        assert keys(store_item_search(workspace=self.workspace, agent=self.agent)) == ["mine"]
        assert keys(store_item_search(workspace=self.workspace, agent=None)) == ["shared"]

    def test_filters_use_langgraphs_operators(self):
        for n, (color, score) in enumerate([("red", 4.5), ("red", 5.5), ("blue", 3.0)]):
            make_item(
                workspace=self.workspace,
                key=f"i{n}",
                value={"color": color, "score": score, "meta": {"tag": f"t{n}"}, "tags": ["a", "b"]},
            )
        make_item(workspace=self.workspace, key="bare", value={"other": 1})

        def found(filter_):
            return sorted(keys(store_item_search(workspace=self.workspace, agent=None, filter=filter_)))

        assert found({"color": "red"}) == ["i0", "i1"]
        assert found({"color": {"$eq": "blue"}}) == ["i2"]
        assert found({"color": {"$ne": "red"}}) == ["bare", "i2"]
        assert found({"score": {"$gt": 4.5}}) == ["i1"]
        assert found({"score": {"$gte": 4.5}}) == ["i0", "i1"]
        assert found({"score": {"$lt": 4.5}}) == ["i2"]
        assert found({"score": {"$lte": 4.5}}) == ["i0", "i2"]
        assert found({"score": {"$gt": 3, "$lt": 5}}) == ["i0"]
        assert found({"color": "red", "score": {"$gt": 5}}) == ["i1"]
        assert found({"meta": {"tag": "t2"}}) == ["i2"]
        assert found({"tags": ["a", "b"]}) == ["i0", "i1", "i2"]
        assert found({"tags": ["a"]}) == []
        assert found({"missing": "x"}) == []
        with self.assertRaises(ApplicationError):
            found({"score": {"$regex": "x"}})

    def test_filter_field_names_are_data_not_sql(self):
        make_item(workspace=self.workspace, value={"a'b": 1, "x') OR 1=1 --": 2})
        assert keys(store_item_search(workspace=self.workspace, agent=None, filter={"a'b": 1})) == ["k1"]
        assert (
            keys(store_item_search(workspace=self.workspace, agent=None, filter={"x') OR 1=1 --": 3})) == []
        )

    def test_a_field_named_by_digits_is_a_field_not_a_position(self):
        # LangGraph's stores read a filter's names as keys of the value's objects; "2024" is a
        # key like any other, at the top as below it, and never an array position.
        make_item(workspace=self.workspace, key="year", value={"2024": "x", "by": {"7": "y"}})
        make_item(workspace=self.workspace, key="list", value={"items": ["x"], "by": {"7": "z"}})

        def found(filter_):
            return sorted(keys(store_item_search(workspace=self.workspace, agent=None, filter=filter_)))

        assert found({"2024": "x"}) == ["year"]
        assert found({"2024": {"$eq": "x"}}) == ["year"]
        assert found({"2024": {"$ne": "x"}}) == ["list"]
        assert found({"by": {"7": "y"}}) == ["year"]
        assert found({"0": "x"}) == []

    def test_equal_numbers_match_whatever_their_spelling(self):
        # JSON equality compares numbers as numbers; so must the containment the value index
        # answers, or an item stored with 5.0 would be missed by {"n": 5}.
        make_item(workspace=self.workspace, key="float", value={"n": 5.0, "m": {"k": 2}})
        make_item(workspace=self.workspace, key="int", value={"n": 5, "m": {"k": 2.00}})

        def found(filter_):
            return sorted(keys(store_item_search(workspace=self.workspace, agent=None, filter=filter_)))

        assert found({"n": 5}) == ["float", "int"]
        assert found({"n": {"$eq": 5.0}}) == ["float", "int"]
        assert found({"m": {"k": 2}}) == ["float", "int"]

    def test_a_filters_pairs_are_its_equalities(self):
        pairs = value_filter_pairs(
            {"kind": "rare", "meta": {"tag": {"$eq": "t"}, "n": {"$gt": 1}}, "score": {"$gt": 1, "$ne": 2}}
        )
        assert pairs == {"kind": "rare", "meta": {"tag": "t"}}
        assert value_filter_pairs({"score": {"$lt": 3}}) == {}
        assert value_filter_pairs({"tags": [], "empty": {}}) == {"tags": [], "empty": {}}

    def test_the_pairs_can_be_answered_by_the_value_index(self):
        """`value @>` of a filter's pairs reaches the value index (store 0005); whether the
        planner takes it depends on how rare the pairs are (docs/speed.md measures it)."""
        pairs = value_filter_pairs({"kind": "rare", "meta": {"tag": {"$eq": "t"}}})
        scope = StoreItem.objects.filter(value__contains=pairs)
        sql, params = scope.values("id").query.sql_with_params()
        plan = bitmap_only_plan(sql, params)
        assert any(node.get("Index Name") == "store_item_value" for node in plan), plan
        assert not any(node.get("Disabled") for node in plan), plan

    def test_the_pairs_are_looked_up_only_under_a_large_prefix(self):
        for n in range(3):
            make_item(workspace=self.workspace, namespace=("big",), key=f"b{n}", value={"kind": n % 2})
        make_item(workspace=self.workspace, namespace=("small",), key="s", value={"kind": 1})
        make_item(workspace=self.workspace, agent=self.agent, namespace=("big",), key="a", value={"kind": 1})

        def search(prefix):
            with CaptureQueriesContext(connection) as queries:
                hits = store_item_search(
                    workspace=self.workspace, agent=None, namespace_prefix=prefix, filter={"kind": 1}
                )
            return sorted(keys(hits)), any("@>" in query["sql"] for query in queries)

        with patch("store.selectors.STORE_VALUE_INDEX_FROM", 3):
            # Three items of the workspace's partition under "big"; the agent's item is not its.
            assert search(("big",)) == (["b1"], True)
            assert search(()) == (["b1", "s"], True)
            assert search(("small",)) == (["s"], False)
        assert search(("big",)) == (["b1"], False)

    def test_limit_offset_and_newest_first_without_a_query(self):
        for n in range(5):
            make_item(workspace=self.workspace, key=f"i{n}")
        page = keys(store_item_search(workspace=self.workspace, agent=None, limit=2, offset=1))
        assert page == ["i3", "i2"]

    def test_a_query_ranks_by_meaning_and_words(self):
        texts = {
            "tea": "Ada prefers green tea in the morning.",
            "city": "Ada moved to Lisbon last spring.",
            "pet": "Ada has a cat named Miso.",
        }
        items = [
            make_item(workspace=self.workspace, key=key, value={"text": text}) for key, text in texts.items()
        ]
        store_items_embed(item_ids=[item.pk for item in items])
        hits = store_item_search(workspace=self.workspace, agent=None, query="which city does she live in?")
        assert keys(hits)[0] == "city"
        assert all(score is not None for _item, score in hits[:1])
        hits = store_item_search(workspace=self.workspace, agent=None, query="kitten", limit=1)
        assert keys(hits) == ["pet"]

    def test_a_search_on_the_hnsw_plan_puts_its_workspaces_vectors_in_the_graph(self):
        """Found the same through the graph as before it; another workspace's stay out."""
        from core.testing import hnsw_above
        from store.models import StoreItemEmbedding

        texts = ["Ada prefers green tea.", "Ada moved to Lisbon.", "Ada has a cat named Miso."]
        items = [
            make_item(workspace=self.workspace, key=f"k{n}", value={"text": t}) for n, t in enumerate(texts)
        ]
        items.append(make_item(workspace=self.other_workspace, key="outside", value={"text": "Lisbon"}))
        store_items_embed(item_ids=[item.pk for item in items])
        with hnsw_above(1):
            first = keys(store_item_search(workspace=self.workspace, agent=None, query="Lisbon"))
            again = keys(store_item_search(workspace=self.workspace, agent=None, query="Lisbon"))
        assert first == again and first[0] == "k1"
        graph = StoreItemEmbedding.objects.filter(in_graph=True)
        assert set(graph.values_list("workspace_id", flat=True)) == {self.workspace.pk}
        assert graph.count() == 3

    def test_searches_a_moment_apart_count_the_scope_once(self):
        """Each search tests expiry against its own clock, which is no part of the scope the
        memos of its vector count and BM25 statistics are kept for: the next search within
        SEARCH_SCOPE_SIZE_CACHE_SECONDS reuses them, and still leaves out what has expired."""
        texts = ["Ada prefers green tea.", "Ada moved to Lisbon.", "Ada has a cat.", "Ada walks to Lisbon."]
        items = [
            make_item(workspace=self.workspace, key=f"k{n}", value={"text": t}) for n, t in enumerate(texts)
        ]
        make_item(workspace=self.workspace, key="brief", value={"text": "Ada flew to Lisbon."}, ttl=1)
        store_items_embed(item_ids=[item.pk for item in items])
        now = timezone.now()

        def search(at):
            with CaptureQueriesContext(connection) as queries:
                found = keys(store_item_search(workspace=self.workspace, agent=None, query="Lisbon", now=at))
            sql = " ".join(query["sql"] for query in queries)
            return found, [
                sql.count("SELECT 1 FROM store_storeitemembedding"),
                sql.count("count(*) FROM scope"),
            ]

        with patch("core.ranking.BM25_STATS_CACHE_MIN_ROWS", 3):
            first, first_counts = search(now)
            again, again_counts = search(now + timedelta(minutes=2))
        assert (first_counts, again_counts) == ([1, 1], [0, 0])
        assert "brief" in first and "brief" not in again
        assert again[:2] == ["k1", "k3"]

    def test_items_put_without_an_index_weigh_nothing_in_the_words_ranking(self):
        """BM25 weighs a match by the item's length against the average indexed item's; an item
        put with `index=False` holds no words. Thirty of them put last made the average read
        from the newest items one word, so a long item with the word four times ranked below a
        short one holding it once."""
        long_text = (
            "kite kite kite kite flying high above green hills beside quiet river towns lazy summer evenings"
        )
        make_item(workspace=self.workspace, key="long", value={"text": long_text})
        make_item(workspace=self.workspace, key="short", value={"text": "a red kite"})
        for n in range(30):
            make_item(workspace=self.workspace, key=f"log{n}", value={"text": f"entry {n}"}, index=False)
        hits = store_item_search(workspace=self.workspace, agent=None, query="kite")
        assert keys(hits)[:2] == ["long", "short"]
        assert hits[1][1] is not None and hits[2][1] is None

    def test_items_the_query_cannot_reach_fill_the_page_unscored(self):
        make_item(workspace=self.workspace, key="lisbon", value={"text": "Lisbon"})
        make_item(workspace=self.workspace, key="hidden", value={"text": "Lisbon"}, index=False)
        hits = store_item_search(workspace=self.workspace, agent=None, query="Lisbon")
        assert keys(hits) == ["lisbon", "hidden"]
        assert hits[0][1] is not None and hits[1][1] is None


class StoreNamespacesTests(MemoryTestCase):
    def setUp(self):
        for namespace in [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
            ("a", "c", "f"),
            ("b", "a", "f"),
            ("users", "123"),
            ("users", "456", "settings"),
        ]:
            make_item(workspace=self.workspace, namespace=namespace)
        make_item(workspace=self.workspace, agent=self.agent, namespace=("private",))

    def listed(self, **kwargs):
        return store_namespaces_list(workspace=self.workspace, agent=None, **kwargs)

    def test_every_namespace_sorted(self):
        assert self.listed()[:3] == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i")]
        assert len(self.listed()) == 8

    def test_prefix_suffix_and_wildcards(self):
        assert self.listed(match_conditions=[("prefix", ("a", "b"))]) == [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
        ]
        assert self.listed(match_conditions=[("suffix", ("f",))]) == [
            ("a", "b", "f"),
            ("a", "c", "f"),
            ("b", "a", "f"),
        ]
        assert self.listed(match_conditions=[("prefix", ("a", "*", "f"))]) == [
            ("a", "b", "f"),
            ("a", "c", "f"),
        ]
        assert self.listed(match_conditions=[("prefix", ("a",)), ("suffix", ("f",))]) == [
            ("a", "b", "f"),
            ("a", "c", "f"),
        ]
        assert self.listed(match_conditions=[("suffix", ("*", "settings"))]) == [("users", "456", "settings")]

    def test_max_depth_limit_and_offset(self):
        assert self.listed(max_depth=2) == [
            ("a", "b"),
            ("a", "c"),
            ("b", "a"),
            ("users", "123"),
            ("users", "456"),
        ]
        assert self.listed(max_depth=1) == [("a",), ("b",), ("users",)]
        assert self.listed(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]

    def test_labels_sort_as_labels_whatever_follows_them(self):
        # By path, "users-old" sorts before "users.123" ("-" comes before "."); as labels,
        # ("users", ...) comes first, as LangGraph sorts tuples. A prefix keeps whole labels.
        make_item(workspace=self.workspace, namespace=("users-old",))
        make_item(workspace=self.workspace, namespace=("users", "-1"))
        users = [("users", "-1"), ("users", "123"), ("users", "456", "settings")]
        assert self.listed()[-4:] == [*users, ("users-old",)]
        assert self.listed(match_conditions=[("prefix", ("users",))]) == users
        assert self.listed(max_depth=1) == [("a",), ("b",), ("users",), ("users-old",)]

    def test_a_namespace_of_expired_items_is_passed_over(self):
        expired = make_item(workspace=self.workspace, namespace=("a", "b", "d", "f"), key="x", ttl=1)
        make_item(workspace=self.workspace, namespace=("a", "b", "d", "f"), key="y", ttl=1)
        StoreItem.objects.filter(ttl_minutes__isnull=False).update(
            expires_at=timezone.now() - timedelta(minutes=1)
        )
        assert expired.namespace not in self.listed()
        assert self.listed(match_conditions=[("prefix", ("a", "b"))]) == [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
        ]

    def test_many_namespaces_are_read_item_by_item_to_the_same_answer(self):
        make_item(workspace=self.workspace, namespace=("users-old",))
        cases = [
            {},
            {"limit": 2, "offset": 3},
            {"max_depth": 1},
            {"match_conditions": [("prefix", ("a", "b"))]},
            {"match_conditions": [("prefix", ("a", "*", "f"))], "max_depth": 2},
            {"match_conditions": [("suffix", ("f",))]},
            {"match_conditions": [("prefix", ("none",))]},
        ]
        walked = [self.listed(**case) for case in cases]
        with patch("store.selectors.NAMESPACES_WALK_MAX", 2), CaptureQueriesContext(connection) as queries:
            read = [self.listed(**case) for case in cases]
        assert read == walked
        assert walked[3] == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
        assert walked[-1] == []
        # Past the walk's limit, each listing read the items; the prefix "none" holds none.
        assert sum("WITH RECURSIVE" not in query["sql"] for query in queries) == len(cases) - 1

    def test_another_partition_is_not_listed(self):
        assert ("private",) not in self.listed()
        assert store_namespaces_list(workspace=self.workspace, agent=self.agent) == [("private",)]
