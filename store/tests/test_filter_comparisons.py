"""Comparison operators ($gt, $gte, $lt, $lte) match values of the operand's JSON type only.

They compared as jsonb orders values of different types (null < strings <
numbers < booleans < arrays < objects), so {"importance": {"$lt": 3}} returned the memories
whose importance was null or "high", and {"score": {"$gt": 4}} those whose score was true, a
list or an object. Neither of LangGraph's own stores returns those: its in-memory store
compares numbers as floats (and fails on the rest), its PostgreSQL store reads null as
missing.
"""

from core.testing import MemoryTestCase
from store.selectors import store_item_search
from store.tests.factories import make_item

VALUES = {
    "low": 1,
    "high": 7,
    "null": None,
    "word": "high",
    "flag": True,
    "list": [1],
    "object": {"n": 1},
}


class StoreComparisonTests(MemoryTestCase):
    def setUp(self):
        for key, importance in VALUES.items():
            make_item(workspace=self.workspace, key=key, value={"importance": importance})
        make_item(workspace=self.workspace, key="missing", value={"other": 1})

    def found(self, filter_):
        hits = store_item_search(workspace=self.workspace, agent=None, filter=filter_, limit=100)
        return sorted(item.key for item, _score in hits)

    def test_numbers_compare_with_numbers_only(self):
        assert self.found({"importance": {"$lt": 3}}) == ["low"]
        assert self.found({"importance": {"$lte": 7}}) == ["high", "low"]
        assert self.found({"importance": {"$gt": 4}}) == ["high"]
        assert self.found({"importance": {"$gte": 1, "$lt": 7}}) == ["low"]

    def test_strings_compare_with_strings_only(self):
        assert self.found({"importance": {"$gte": "a"}}) == ["word"]
        assert self.found({"importance": {"$lt": "a"}}) == []

    def test_equality_and_ne_are_unchanged(self):
        assert self.found({"importance": None}) == ["null"]
        assert self.found({"importance": {"$eq": 1}}) == ["low"]
        assert self.found({"importance": {"$ne": 1}}) == sorted(set(VALUES) - {"low"} | {"missing"})
