"""Which foreign key violations are a 404: a row the request refers to is gone, not a row the
server deleted while others still refer to it (its own bug, which stays a 500). Which aborts
are a transaction lost to a concurrent one, worth running again."""

import uuid

import psycopg
from django.db import IntegrityError, OperationalError, connection, transaction

from core.errors import backend_error, transaction_lost
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


class TransactionLostTests(MemoryTestCase):
    def _wrapped(self, error: psycopg.Error) -> OperationalError:
        try:
            raise OperationalError(str(error)) from error
        except OperationalError as exc:
            return exc

    def test_a_deadlock_victim_and_a_serialization_failure_are_lost_transactions(self):
        for error in (psycopg.errors.DeadlockDetected("d"), psycopg.errors.SerializationFailure("s")):
            with self.subTest(type(error).__name__):
                assert transaction_lost(self._wrapped(error))
                assert transaction_lost(error)

    def test_a_timeout_or_a_lost_connection_is_not(self):
        for error in (
            psycopg.errors.QueryCanceled("q"),
            psycopg.errors.LockNotAvailable("l"),
            psycopg.OperationalError("x"),
        ):
            with self.subTest(type(error).__name__):
                assert not transaction_lost(self._wrapped(error))
        assert not transaction_lost(ValueError("not a database error"))
