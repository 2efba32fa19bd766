"""Which foreign key violations are a 404: a row the request refers to is gone, not a row the
server deleted while others still refer to it (its own bug, which stays a 500)."""

import uuid

from django.db import IntegrityError, connection, transaction

from core.errors import backend_error
from core.models import Agent, ApiKey
from core.testing import MemoryTestCase


class ForeignKeyViolationTests(MemoryTestCase):
    def _refused(self, sql: str, params) -> IntegrityError:
        with self.assertRaises(IntegrityError) as caught, transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(sql, params)
        return caught.exception

    def test_a_reference_to_a_row_that_is_gone_is_a_404(self):
        exc = self._refused(
            f"UPDATE {ApiKey._meta.db_table} SET agent_id = %s WHERE id = %s",
            [uuid.uuid4(), self.agent_api_key.pk],
        )
        status, body, _ = backend_error(exc)
        assert (status, body["error"]["code"]) == (404, "not_found")

    def test_deleting_a_row_still_referred_to_is_not_answered_as_the_clients_404(self):
        exc = self._refused(f"DELETE FROM {Agent._meta.db_table} WHERE id = %s", [self.agent.pk])
        assert backend_error(exc) is None
