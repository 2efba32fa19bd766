"""The shared kernel: keys, authentication, agents API, provider credentials and the
admin of core models, each test a defect a user could hit (or the sound behaviour next to it)."""

from django.contrib.auth import get_user_model
from django.test import override_settings
from rest_framework.test import APIClient

from core.admin import PROVIDER_URL_PRIVATE
from core.errors import ApplicationError
from core.models import ApiKey, ProviderCredential
from core.selectors import api_key_cache_clear, provider_cache_clear, provider_credential_get
from core.services import api_key_create
from core.testing import MemoryTestCase

AGENTS_URL = "/api/v1/agents/"


class AuthorizationHeaderTests(MemoryTestCase):
    def _get(self, header: str):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        return client.get(AGENTS_URL)

    def test_blank_authorization_header_is_401_not_500(self):
        # A header of white space only (a client that sent `Authorization: ` with an empty
        # variable, or a non-breaking space, which latin-1 decodes to white space).
        for header in (" ", "\t", "\xa0"):
            response = self._get(header)
            assert response.status_code == 401, (repr(header), response.status_code)
            assert response.json()["error"]["code"] == "not_authenticated"


class ApiKeyCreateTests(MemoryTestCase):
    def test_expiry_past_the_calendar_is_refused_with_a_400(self):
        for days in (10**6, 10**9, 10**12):
            with self.assertRaises(ApplicationError) as caught:
                api_key_create(workspace=self.workspace, expires_in_days=days)
            assert "expires_in_days" in caught.exception.fields
        assert not ApiKey.objects.filter(workspace=self.workspace, expires_at__isnull=False).exists()

    def test_agent_of_another_workspace_is_refused(self):
        with self.assertRaises(ApplicationError) as caught:
            api_key_create(workspace=self.workspace, agent=self.outsider_agent)
        assert "agent" in caught.exception.fields
        assert not ApiKey.objects.filter(agent=self.outsider_agent).exists()


class ApiKeyAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)

    def test_huge_expiry_is_a_form_error_not_a_500(self):
        response = self.client.post(
            "/admin/core/apikey/add/",
            {"workspace": self.workspace.pk, "name": "forever", "expires_in_days": "99999999"},
        )
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["expires_in_days"]
        assert not ApiKey.objects.filter(name="forever").exists()

    def test_agent_of_another_workspace_is_a_form_error(self):
        response = self.client.post(
            "/admin/core/apikey/add/",
            {"workspace": self.workspace.pk, "agent": self.outsider_agent.pk, "name": "crossed"},
        )
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["agent"]
        assert not ApiKey.objects.filter(name="crossed").exists()


class AgentSettingsTests(MemoryTestCase):
    def test_unknown_setting_reset_to_null_is_400(self):
        response = self.api().patch(
            f"{AGENTS_URL}{self.agent.slug}/", {"memory_settings": {"no_such_setting": None}}, format="json"
        )
        assert response.status_code == 400, response.content
        assert "no_such_setting" in response.json()["error"]["fields"]


class AgentsHostileInputTests(MemoryTestCase):
    def assert_4xx(self, response):
        assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
        assert response.json()["error"]["code"]

    def test_register_refuses_bad_input_with_a_4xx(self):
        bodies = [
            [],
            "slug",
            {"slug": "бот"},
            {"slug": "a" * 101},
            {"slug": "ok", "memory_settings": []},
            {"slug": "ok", "memory_settings": {"token_limit": 10**30}},
            {"slug": "ok", "memory_settings": {"compaction_threshold": 10**400}},
            {"slug": "ok", "memory_settings": {"recall_memory_type": {"a": 1}}},
            {"slug": "ok", "memory_settings": {"recall_memory_type": ["all"]}},
            {"slug": "ok", "memory_settings": {"recent_messages": None}},
            {"slug": "ok", "memory_settings": {"": 1}},
            {"slug": "ok", "name": {"x": 1}},
        ]
        for body in bodies:
            self.assert_4xx(self.api().post(AGENTS_URL, body, format="json"))

    def test_patch_refuses_bad_input_with_a_4xx(self):
        url = f"{AGENTS_URL}{self.agent.slug}/"
        for body in [
            [],
            {"memory_settings": None},
            {"memory_settings": {"recent_messages": 0.5}},
            {"slug": "x"},
        ]:
            self.assert_4xx(self.api().patch(url, body, format="json"))

    def test_list_refuses_bad_paging_with_a_4xx_or_serves(self):
        for query in ["limit=-1", "limit=abc", "offset=-5", "offset=99999999999999999999", "limit=10**9"]:
            response = self.api().get(f"{AGENTS_URL}?{query}")
            assert response.status_code < 500, (query, response.status_code)

    def test_detail_with_a_long_slug_is_404(self):
        response = self.api().get(f"{AGENTS_URL}{'a' * 5000}/")
        assert response.status_code == 404


# The test settings allow private endpoints (test servers listen on 127.0.0.1); the admin's
# refusal is checked as production runs.
@override_settings(PROVIDER_CACHE_SECONDS=60, PROVIDER_ALLOW_PRIVATE_URLS=False)
class ProviderCredentialAdminTests(MemoryTestCase):
    def setUp(self):
        provider_cache_clear()
        self.addCleanup(provider_cache_clear)
        self.owner.is_staff = True
        self.owner.save(update_fields=["is_staff"])
        self.client.force_login(self.owner)

    def _add(self, **fields):
        data = {"workspace": self.workspace.pk, "purpose": "chat", "model": "m", "api_key": "", **fields}
        return self.client.post("/admin/core/providercredential/add/", data)

    def test_a_change_in_the_admin_applies_at_once_in_this_process(self):
        assert provider_credential_get(workspace=self.workspace, purpose="chat") is None
        response = self._add(base_url="https://llm.example/v1", api_key="sk-admin")
        assert response.status_code == 302, response.content[:500]
        endpoint = provider_credential_get(workspace=self.workspace, purpose="chat")
        assert endpoint == {
            "base_url": "https://llm.example/v1",
            "model": "m",
            "api_key": "sk-admin",
            "private_allowed": False,
        }
        stored = ProviderCredential.objects.get(workspace=self.workspace)
        assert "sk-admin" not in stored.api_key_encrypted
        change_page = self.client.get(f"/admin/core/providercredential/{stored.pk}/change/")
        assert b"sk-admin" not in change_page.content

    def test_a_workspace_admin_cannot_point_the_server_at_a_private_address(self):
        """The workers send the workspace's embedding and chat requests there."""
        for url in (
            "http://169.254.169.254/latest/meta-data",
            "http://[::ffff:10.0.0.5]/v1",
            "http://localhost:8000/v1",
        ):
            response = self._add(base_url=url)
            assert response.status_code == 200, url
            assert response.context["adminform"].form.errors["base_url"] == [PROVIDER_URL_PRIVATE], url
        assert not ProviderCredential.objects.filter(workspace=self.workspace).exists()

    def test_a_superuser_or_the_setting_may_name_a_self_hosted_model(self):
        with override_settings(PROVIDER_ALLOW_PRIVATE_URLS=True):
            assert self._add(base_url="http://10.0.0.5:8000/v1").status_code == 302
        ProviderCredential.objects.all().delete()
        self.owner.is_superuser = True
        self.owner.save(update_fields=["is_superuser"])
        assert self._add(base_url="http://127.0.0.1:11434/v1").status_code == 302

    def test_only_a_superusers_save_lets_requests_reach_a_private_address(self):
        """The send-time check (core.lib.addresses.provider_target) lets a private address
        through for an endpoint a superuser saved; a workspace admin's save takes that back."""
        with override_settings(PROVIDER_ALLOW_PRIVATE_URLS=True):
            assert self._add(base_url="http://10.0.0.5:8000/v1").status_code == 302
        stored = ProviderCredential.objects.get(workspace=self.workspace)
        assert stored.private_allowed is False
        self.owner.is_superuser = True
        self.owner.save(update_fields=["is_superuser"])
        change = f"/admin/core/providercredential/{stored.pk}/change/"
        data = {"workspace": self.workspace.pk, "purpose": "chat", "model": "m", "api_key": ""}
        assert self.client.post(change, {**data, "base_url": "http://127.0.0.1:11434/v1"}).status_code == 302
        stored.refresh_from_db()
        assert stored.private_allowed is True
        assert provider_credential_get(workspace=self.workspace, purpose="chat")["private_allowed"] is True
        self.owner.is_superuser = False
        self.owner.save(update_fields=["is_superuser"])
        assert self.client.post(change, {**data, "base_url": "https://llm.example/v1"}).status_code == 302
        stored.refresh_from_db()
        assert stored.private_allowed is False


@override_settings(API_KEY_CACHE_SECONDS=60)
class KeyCacheAdminTests(MemoryTestCase):
    """The admin acts in a web process: what it changes must not outlive itself there."""

    def setUp(self):
        api_key_cache_clear()
        self.addCleanup(api_key_cache_clear)
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)

    def test_a_key_deleted_in_the_admin_is_refused_at_once(self):
        api_key, secret = api_key_create(workspace=self.workspace, name="doomed")
        assert self.api(secret).get(AGENTS_URL).status_code == 200
        response = self.client.post(f"/admin/core/apikey/{api_key.pk}/delete/", {"post": "yes"})
        assert response.status_code == 302
        assert self.api(secret).get(AGENTS_URL).status_code == 401

    def test_keys_deleted_by_the_bulk_action_are_refused_at_once(self):
        api_key, secret = api_key_create(workspace=self.workspace, name="doomed")
        assert self.api(secret).get(AGENTS_URL).status_code == 200
        self.client.post(
            "/admin/core/apikey/",
            {"action": "delete_selected", "_selected_action": [api_key.pk], "post": "yes"},
        )
        assert not ApiKey.objects.filter(pk=api_key.pk).exists()
        assert self.api(secret).get(AGENTS_URL).status_code == 401

    def test_agent_settings_changed_in_the_admin_apply_at_once_to_its_keys(self):
        url = f"{AGENTS_URL}{self.agent.slug}/"
        assert self.api(self.agent_key).get(url).json()["effective_memory_settings"]["recent_messages"] != 7
        response = self.client.post(
            f"/admin/core/agent/{self.agent.pk}/change/",
            {
                "workspace": self.workspace.pk,
                "slug": self.agent.slug,
                "name": self.agent.name,
                "memory_settings": '{"recent_messages": 7}',
            },
        )
        assert response.status_code == 302
        # The key's cached principal carries its agent, whose settings the context reads.
        from core.selectors import api_key_authenticate

        assert api_key_authenticate(secret=self.agent_key).agent.memory_settings == {"recent_messages": 7}
