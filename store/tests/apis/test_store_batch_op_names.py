"""A batch op named by something other than a string is a 400 like an unknown op.

Found by the contract run once the schema documented each op (`"op": {}` was a 500: a dict is
not hashable, and the view looked it up in a dict of op serializers).
"""

from core.testing import MemoryTestCase

BATCH = "/api/v1/store/batch/"


class StoreBatchOpNameTests(MemoryTestCase):
    def test_an_op_named_by_an_object_a_list_or_a_number_is_a_400(self):
        for name in ({}, [], 1, None):
            response = self.api().post(BATCH, {"agent": "assistant", "ops": [{"op": name}]}, format="json")
            assert response.status_code == 400, (name, response.content)
            assert response.json()["error"]["fields"]["ops"]["0"]["op"], response.content
