import re

from django.urls import reverse

from browser.tests.base import BrowserTestCase
from core.models import ApiKey
from core.selectors import api_key_authenticate


class ApiKeysPageTests(BrowserTestCase):
    def url(self, name="memories:api-keys", **kwargs):
        return reverse(name, kwargs={"workspace_id": self.workspace.pk, **kwargs})

    def test_admin_lists_the_workspace_keys_without_secrets(self):
        self.open_as(self.owner, self.url())
        # session, user, memberships, keys, agents (form).
        with self.assertNumQueries(5):
            response = self.client.get(self.url())
        content = response.content.decode()
        assert self.owner_api_key.prefix in content
        assert self.outsider_api_key.prefix not in content
        assert self.owner_key not in content
        assert self.owner_api_key.secret_hash not in content

    def test_new_key_secret_is_shown_once_and_works(self):
        self.login(self.owner)
        response = self.client.post(
            self.url("memories:api-key-create"),
            {"name": "bot", "agent": self.agent.slug, "read_only": "on", "expires_in_days": "30"},
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="main",
        )
        assert response.status_code == 200
        assert response["Cache-Control"] == "no-store"
        secret = re.search(r'value="(mem_[^"]+)"', response.content.decode()).group(1)
        api_key = api_key_authenticate(secret=secret)
        assert api_key.agent == self.agent
        assert api_key.read_only
        assert api_key.created_by == self.owner
        assert secret not in self.client.get(self.url()).content.decode()

    def test_agent_of_another_workspace_is_rejected(self):
        self.login(self.owner)
        other = self.outsider_agent
        other.slug = "only-elsewhere"
        other.save()
        response = self.client.post(
            self.url("memories:api-key-create"), {"name": "x", "agent": "only-elsewhere"}
        )
        assert response.status_code == 400
        assert b"Select a valid choice" in response.content
        assert not ApiKey.objects.filter(name="x").exists()

    def test_revoke(self):
        self.login(self.owner)
        response = self.client.post(
            self.url("memories:api-key-revoke", api_key_id=self.agent_api_key.pk),
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="keys-list",
        )
        assert response.status_code == 200
        assert "revoked" in response["HX-Trigger"]
        assert api_key_authenticate(secret=self.agent_key) is None

    def test_outsider_cannot_see_or_revoke(self):
        self.login(self.outsider)
        assert self.client.get(self.url()).status_code == 404
        response = self.client.post(self.url("memories:api-key-revoke", api_key_id=self.owner_api_key.pk))
        assert response.status_code == 404
        assert api_key_authenticate(secret=self.owner_key) is not None

    def test_key_of_another_workspace_is_404_for_an_admin(self):
        self.login(self.owner)
        response = self.client.post(self.url("memories:api-key-revoke", api_key_id=self.outsider_api_key.pk))
        assert response.status_code == 404

    def test_editor_and_viewer_are_refused(self):
        for user in (self.teammate, self.viewer):
            self.login(user)
            assert self.client.get(self.url()).status_code == 403
            response = self.client.post(self.url("memories:api-key-revoke", api_key_id=self.owner_api_key.pk))
            assert response.status_code == 403
        assert api_key_authenticate(secret=self.owner_key) is not None
