from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from core.authentication import INVALID_KEY
from core.errors import READ_ONLY_KEY
from core.models import ApiKey
from core.selectors import api_key_cache_clear
from core.services import agent_update, api_key_create, api_key_revoke
from core.testing import MemoryTestCase

AGENTS_URL = "/api/v1/agents/"


class ApiKeyAuthenticationTests(MemoryTestCase):
    def test_missing_key_is_401_with_error_body(self):
        response = self.client.get(AGENTS_URL)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"
        assert response["WWW-Authenticate"].startswith("Bearer")

    def test_wrong_key_is_401(self):
        response = self.api("mem_nothere_secret").get(AGENTS_URL)
        assert response.status_code == 401
        assert response.json() == {
            "error": {"code": "not_authenticated", "message": INVALID_KEY, "fields": {}}
        }

    def test_right_prefix_wrong_secret_is_401(self):
        tampered = self.owner_key[:-4] + "abcd"
        assert self.api(tampered).get(AGENTS_URL).status_code == 401

    def test_revoked_key_is_401(self):
        api_key, secret = api_key_create(workspace=self.workspace)
        api_key_revoke(api_key=api_key)
        assert self.api(secret).get(AGENTS_URL).status_code == 401

    def test_expired_key_is_401(self):
        api_key, secret = api_key_create(workspace=self.workspace, expires_in_days=1)
        ApiKey.objects.filter(pk=api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert self.api(secret).get(AGENTS_URL).status_code == 401

    def test_use_records_last_used_at(self):
        self.api().get(AGENTS_URL)
        self.owner_api_key.refresh_from_db()
        assert self.owner_api_key.last_used_at is not None

    def test_read_only_key_cannot_write(self):
        response = self.api(self.read_only_key).post(AGENTS_URL, {"slug": "new"}, format="json")
        assert response.status_code == 403
        assert response.json()["error"] == {
            "code": "permission_denied",
            "message": READ_ONLY_KEY,
            "fields": {},
        }

    def test_read_only_key_can_read(self):
        assert self.api(self.read_only_key).get(AGENTS_URL).status_code == 200

    def test_secret_is_stored_hashed(self):
        assert self.owner_key not in self.owner_api_key.secret_hash
        assert len(self.owner_api_key.secret_hash) == 64
        assert self.owner_key.startswith(f"mem_{self.owner_api_key.prefix}_")


@override_settings(API_KEY_CACHE_SECONDS=60)
class ApiKeyCacheTests(MemoryTestCase):
    def setUp(self):
        api_key_cache_clear()
        self.addCleanup(api_key_cache_clear)

    def test_repeated_requests_skip_the_key_lookup(self):
        client = self.api()
        client.get(AGENTS_URL)
        # The page alone (short: its own total): the key comes from the process cache.
        with self.assertNumQueries(1):
            client.get(AGENTS_URL)

    def test_revoking_through_the_service_takes_effect_at_once(self):
        client = self.api()
        assert client.get(AGENTS_URL).status_code == 200
        api_key_revoke(api_key=self.owner_api_key)
        assert client.get(AGENTS_URL).status_code == 401

    def test_agent_settings_changes_take_effect_at_once(self):
        client = self.api(self.agent_key)
        client.get(AGENTS_URL)
        agent_update(agent=self.agent, memory_settings={"recent_messages": 7})
        body = client.get(AGENTS_URL).json()
        assert body["results"][0]["effective_memory_settings"]["recent_messages"] == 7
