from django.test import override_settings

from core.models import ProviderCredential
from core.selectors import provider_cache_clear, provider_credential_get
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
        assert credential == {
            "base_url": "http://localhost:8002/v1",
            "model": "b",
            "api_key": "k1",
            "private_allowed": False,
        }

    def test_other_workspace_has_none(self):
        provider_credential_set(
            workspace=self.workspace,
            purpose="chat",
            base_url="http://localhost:8001/v1",
            model="a",
            api_key="k",
        )
        assert provider_credential_get(workspace=self.other_workspace, purpose="chat") is None


@override_settings(PROVIDER_CACHE_SECONDS=60)
class ProviderCredentialCacheTests(MemoryTestCase):
    def setUp(self):
        provider_cache_clear()
        self.addCleanup(provider_cache_clear)

    def test_repeated_lookups_skip_the_database(self):
        """A process reads a workspace's endpoint once per TTL, with or without a stored one."""
        provider_credential_set(
            workspace=self.workspace,
            purpose="embedding",
            base_url="http://embed.example/v1",
            model="m1",
            api_key="k1",
        )
        first = provider_credential_get(workspace=self.workspace, purpose="embedding")
        with self.assertNumQueries(0):
            assert provider_credential_get(workspace=self.workspace, purpose="embedding") == first
            assert first == {
                "base_url": "http://embed.example/v1",
                "model": "m1",
                "api_key": "k1",
                "private_allowed": False,
            }
        assert provider_credential_get(workspace=self.other_workspace, purpose="embedding") is None
        with self.assertNumQueries(0):
            assert provider_credential_get(workspace=self.other_workspace, purpose="embedding") is None

    def test_setting_an_endpoint_takes_effect_at_once(self):
        """Changing the endpoint through the service clears this process's copy."""
        provider_credential_get(workspace=self.workspace, purpose="chat")
        provider_credential_set(
            workspace=self.workspace, purpose="chat", base_url="http://chat.example/v1", model="m2"
        )
        assert provider_credential_get(workspace=self.workspace, purpose="chat")["model"] == "m2"

    def test_callers_cannot_alter_the_cached_endpoint(self):
        """Each caller gets its own copy."""
        provider_credential_set(
            workspace=self.workspace, purpose="chat", base_url="http://chat.example/v1", model="m"
        )
        provider_credential_get(workspace=self.workspace, purpose="chat")["model"] = "changed"
        assert provider_credential_get(workspace=self.workspace, purpose="chat")["model"] == "m"
