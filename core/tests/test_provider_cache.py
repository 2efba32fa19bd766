from django.test import override_settings

from core.selectors import provider_cache_clear, provider_credential_get
from core.services import provider_credential_set
from core.testing import MemoryTestCase


@override_settings(PROVIDER_CACHE_SECONDS=60)
class ProviderCacheTests(MemoryTestCase):
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
            assert first == {"base_url": "http://embed.example/v1", "model": "m1", "api_key": "k1"}
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
