from django.contrib.auth import get_user_model

from core.models import ApiKey
from core.selectors import api_key_authenticate
from core.testing import MemoryTestCase


class ApiKeyAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)

    def test_creating_a_key_shows_the_secret_once_and_stores_only_its_hash(self):
        response = self.client.post(
            "/admin/core/apikey/add/",
            {"workspace": self.workspace.pk, "name": "from-admin", "expires_in_days": "3"},
            follow=True,
        )
        assert response.status_code == 200
        message = next(str(m) for m in response.context["messages"])
        secret = message.rsplit(" ", 1)[-1]
        api_key = api_key_authenticate(secret=secret)
        assert api_key.name == "from-admin"
        assert api_key.expires_at is not None
        change_page = self.client.get(f"/admin/core/apikey/{api_key.pk}/change/")
        assert secret.encode() not in change_page.content
        assert api_key.secret_hash.encode() not in change_page.content

    def test_changelists_render(self):
        for model in ["workspace", "membership", "agent", "apikey", "providercredential", "auditevent"]:
            assert self.client.get(f"/admin/core/{model}/").status_code == 200, model

    def test_revoke_action(self):
        self.client.post(
            "/admin/core/apikey/",
            {"action": "revoke", "_selected_action": [self.owner_api_key.pk]},
        )
        assert ApiKey.objects.get(pk=self.owner_api_key.pk).revoked_at is not None


class AgentAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)

    def _change(self, memory_settings: str):
        return self.client.post(
            f"/admin/core/agent/{self.agent.pk}/change/",
            {
                "workspace": self.workspace.pk,
                "slug": self.agent.slug,
                "name": self.agent.name,
                "memory_settings": memory_settings,
            },
        )

    def test_memory_settings_the_api_would_refuse_are_refused(self):
        """The admin holds memory_settings to the API's rules: an object of known, valid settings."""
        for value in ['["token_limit"]', '{"token_limit": "many"}', '{"no_such_setting": 1}']:
            response = self._change(value)
            assert response.status_code == 200, value
            assert response.context["adminform"].form.errors["memory_settings"], value
        self.agent.refresh_from_db()
        assert self.agent.memory_settings == {}

    def test_valid_memory_settings_are_saved(self):
        response = self._change('{"token_limit": 3000}')
        assert response.status_code == 302, response.context["adminform"].form.errors
        self.agent.refresh_from_db()
        assert self.agent.memory_settings == {"token_limit": 3000}
