"""A real streaming standby of the test database's server, added as the "replica" alias."""

import copy
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import TransactionTestCase, override_settings
from rest_framework.test import APIClient

from core.lib.embedded import EmbeddedStandby
from core.lib.replica import REPLICA_DB_ALIAS, replica_health_forget
from core.services import api_key_create, workspace_create

REPLICA_SETTINGS = {
    "ROOT_URLCONF": "core.tests.replica.urls",
    "DATABASE_ROUTERS": ["core.lib.replica.ReplicaRouter"],
    "MIDDLEWARE": [*settings.MIDDLEWARE, "core.middleware.ReadReplicaMiddleware"],
    # Every request checks the replica's health and lag; production caches it for a second.
    "DATABASE_REPLICA_CHECK_SECONDS": 0,
}


def _replica_settings_add(host: str) -> None:
    # The test runner already pointed default's NAME at the test database, which the
    # standby holds too. connections.settings is settings.DATABASES itself, and
    # TEST["MIRROR"] keeps TransactionTestCase from flushing the read-only standby.
    primary = connections[DEFAULT_DB_ALIAS].settings_dict
    replica = copy.deepcopy(primary)
    replica["HOST"] = host
    replica["TEST"]["MIRROR"] = DEFAULT_DB_ALIAS
    connections.settings[REPLICA_DB_ALIAS] = replica


def _replica_settings_remove() -> None:
    connections[REPLICA_DB_ALIAS].close()
    del connections[REPLICA_DB_ALIAS]
    del connections.settings[REPLICA_DB_ALIAS]


@pytest.mark.slow
@override_settings(**REPLICA_SETTINGS)
class StandbyTestCase(TransactionTestCase):
    """Starts one standby per class; keys `key` and `other_key` are two principals."""

    databases = {DEFAULT_DB_ALIAS, REPLICA_DB_ALIAS}

    @classmethod
    def setUpClass(cls):
        primary_host = connections[DEFAULT_DB_ALIAS].settings_dict["HOST"]
        if not Path(primary_host or "/nonexistent").is_dir():
            raise pytest.skip.Exception("the standby needs the embedded test server (unix socket)")
        directory = tempfile.mkdtemp(prefix="memory-test-standby-")
        cls.addClassCleanup(shutil.rmtree, directory, ignore_errors=True)
        cls.standby = EmbeddedStandby(primary_host, directory)
        cls.standby.start()
        cls.addClassCleanup(cls.standby.stop)
        _replica_settings_add(str(cls.standby.pgdata))
        cls.addClassCleanup(_replica_settings_remove)
        super().setUpClass()

    def setUp(self):
        replica_health_forget()
        self.workspace = workspace_create(name="Acme")
        _, self.key = api_key_create(workspace=self.workspace, name="writer")
        _, self.other_key = api_key_create(workspace=self.workspace, name="reader")
        self.replayed_wait()

    def api(self, key: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client

    def replayed_wait(self, *, received_only: bool = False) -> None:
        """Until the standby has replayed (or only received) everything the primary wrote."""
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            # The insert position: the primary commits asynchronously (synchronous_commit
            # off), so its last commits may not be written out yet.
            cursor.execute("SELECT pg_current_wal_insert_lsn()")
            (position,) = cursor.fetchone()
        function = "pg_last_wal_receive_lsn" if received_only else "pg_last_wal_replay_lsn"
        deadline = time.monotonic() + 15
        while True:
            with connections[REPLICA_DB_ALIAS].cursor() as cursor:
                cursor.execute(f"SELECT {function}() >= %s::pg_lsn", [position])
                if cursor.fetchone()[0]:
                    return
            assert time.monotonic() < deadline, f"the standby did not reach {position}"
            time.sleep(0.02)

    def replay_pause(self) -> None:
        """Freeze what the standby shows: later commits arrive but are not applied."""
        with connections[REPLICA_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT pg_wal_replay_pause()")
        self.addCleanup(self._replay_resume)

    def _replay_resume(self) -> None:
        with connections[REPLICA_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT pg_wal_replay_resume()")
