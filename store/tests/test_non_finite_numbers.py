"""Numbers JSON text can spell but jsonb cannot hold.

Python's JSON decoder reads 1e400 as Infinity without complaint, so a put
with {"x": 1e400}, a filter comparing with it, or a value typed into the /memories edit form
reached PostgreSQL, which refused it: the API answered its generic "a value does not fit"
400 without naming the field, and a direct call of the service raised a database error. The
API's parser now refuses such a number in any body (core.parsers); the service refuses NaN and
Infinity from any other caller, naming the field.
"""

import math

from core.errors import ApplicationError
from core.parsers import JSON_NUMBER_RANGE
from core.testing import MemoryTestCase
from store.filters import FILTER_NOT_FINITE
from store.models import StoreItem
from store.selectors import store_item_search
from store.services import VALUE_NOT_FINITE, store_item_put
from store.tests.factories import make_item

ITEM = "/api/v1/store/item/"
SEARCH = "/api/v1/store/search/"
BATCH = "/api/v1/store/batch/"


class StoreNonFiniteNumberTests(MemoryTestCase):
    def send(self, method, url, text):
        return getattr(self.api(), method)(url, data=text, content_type="application/json")

    def test_a_value_holding_an_infinite_number_is_a_400_naming_the_value(self):
        response = self.send("put", ITEM, '{"namespace": ["a"], "key": "k", "value": {"x": [1, 1e400]}}')
        assert response.status_code == 400, response.content
        assert response.json()["error"]["message"] == JSON_NUMBER_RANGE
        ops = '{"ops": [{"op": "put", "namespace": ["a"], "key": "k", "value": {"x": -1e400}}]}'
        response = self.send("post", BATCH, ops)
        assert response.status_code == 400, response.content
        assert response.json()["error"]["message"] == JSON_NUMBER_RANGE
        for bad in (math.inf, math.nan):
            with self.subTest(bad=bad), self.assertRaisesMessage(ApplicationError, VALUE_NOT_FINITE):
                store_item_put(
                    workspace=self.workspace, agent=None, namespace=("a",), key="k", value={"x": bad}
                )
        assert not StoreItem.objects.exists()

    def test_a_filter_comparing_with_an_infinite_number_is_a_400_naming_the_filter(self):
        make_item(workspace=self.workspace, value={"x": 1})
        for body in (
            '{"filter": {"x": 1e400}}',
            '{"filter": {"x": {"$gt": -1e400}}}',
            '{"filter": {"m": {"x": 1e400}}}',
        ):
            with self.subTest(body=body):
                response = self.send("post", SEARCH, body)
                assert response.status_code == 400, response.content
                assert response.json()["error"]["message"] == JSON_NUMBER_RANGE
        with self.assertRaisesMessage(ApplicationError, FILTER_NOT_FINITE):
            store_item_search(workspace=self.workspace, agent=None, filter={"x": {"$lt": math.nan}})
