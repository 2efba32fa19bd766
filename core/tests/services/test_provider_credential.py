from core.models import ProviderCredential
from core.selectors import provider_credential_get
from core.services import provider_credential_set
from core.testing import MemoryTestCase


class ProviderCredentialTests(MemoryTestCase):
    def test_key_is_encrypted_at_rest_and_readable_by_the_service(self):
        provider_credential_set(
            workspace=self.workspace,
            purpose="chat",
            base_url="http://127.0.0.1:9/v1",
            model="m",
            api_key="sk-secret",
        )
        stored = ProviderCredential.objects.get(workspace=self.workspace)
        assert "sk-secret" not in stored.api_key_encrypted
        assert provider_credential_get(workspace=self.workspace, purpose="chat")["api_key"] == "sk-secret"

    def test_updating_without_a_key_keeps_the_key(self):
        provider_credential_set(
            workspace=self.workspace,
            purpose="embedding",
            base_url="http://localhost:8001/v1",
            model="a",
            api_key="k1",
        )
        provider_credential_set(
            workspace=self.workspace, purpose="embedding", base_url="http://localhost:8002/v1", model="b"
        )
        credential = provider_credential_get(workspace=self.workspace, purpose="embedding")
        assert credential == {"base_url": "http://localhost:8002/v1", "model": "b", "api_key": "k1"}

    def test_other_workspace_has_none(self):
        provider_credential_set(
            workspace=self.workspace,
            purpose="chat",
            base_url="http://localhost:8001/v1",
            model="a",
            api_key="k",
        )
        assert provider_credential_get(workspace=self.other_workspace, purpose="chat") is None
