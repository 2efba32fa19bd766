"""Migration 0005 adds ProviderCredential.private_allowed: every endpoint stays, none is let
through to a private address until a superuser saves it again, and reversing keeps them."""

from django.db import connection
from django.test import TransactionTestCase

from core.models import ProviderCredential
from core.services import provider_credential_set, workspace_create
from core.testing import migrate_to

BEFORE = [("core", "0004_llm_job_defer")]
ROWS_SQL = "SELECT id, workspace_id, purpose, base_url, model, api_key_encrypted FROM core_providercredential"


def _rows() -> set:
    with connection.cursor() as cursor:
        cursor.execute(ROWS_SQL)
        return set(cursor.fetchall())


class ProviderPrivateAllowedMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_every_endpoint_is_kept_and_none_is_allowed_a_private_address(self):
        for name in ("Acme", "Globex"):
            workspace = workspace_create(name=name)
            provider_credential_set(
                workspace=workspace, purpose="chat", base_url="http://10.0.0.5/v1", model="m", api_key="sk"
            )
            provider_credential_set(
                workspace=workspace,
                purpose="embedding",
                base_url="https://llm.example/v1",
                model="e",
                private_allowed=True,
            )
        before = _rows()
        assert len(before) == 4

        migrate_to(BEFORE)
        assert _rows() == before

        migrate_to()
        assert _rows() == before
        assert not ProviderCredential.objects.filter(private_allowed=True).exists()
