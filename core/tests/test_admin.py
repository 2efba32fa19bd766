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
