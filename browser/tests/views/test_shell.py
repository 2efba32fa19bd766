from django.urls import reverse

from core.models import Membership
from core.services import membership_set
from core.testing import PASSWORD, MemoryTestCase


class LoginAndHomeTests(MemoryTestCase):
    def test_anonymous_visitors_are_sent_to_the_login_page(self):
        response = self.client.get("/memories/")
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")

    def test_anonymous_htmx_request_gets_a_client_redirect(self):
        url = reverse("memories:members", kwargs={"workspace_id": self.workspace.pk})
        response = self.client.get(url, HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        assert response["HX-Redirect"].startswith("/accounts/login/")

    def test_login_page_renders_labelled_fields_and_logs_in(self):
        page = self.client.get("/accounts/login/")
        assert page.status_code == 200
        assert b'<label for="id_username">' in page.content
        response = self.client.post("/accounts/login/", {"username": "owner", "password": PASSWORD})
        assert response.status_code == 302
        assert response["Location"] == "/memories/"

    def test_wrong_password_shows_an_error(self):
        response = self.client.post("/accounts/login/", {"username": "owner", "password": "nope"})
        assert response.status_code == 200
        assert b'role="alert"' in response.content

    def test_home_opens_the_operators_workspace(self):
        self.login(self.teammate)
        response = self.client.get("/memories/")
        assert response.status_code == 302
        assert str(self.workspace.pk) in response["Location"]

    def test_home_reopens_the_workspace_used_last(self):
        membership_set(workspace=self.other_workspace, user=self.teammate, role=Membership.Role.VIEWER)
        self.login(self.teammate)
        self.client.get(reverse("memories:workspace", kwargs={"workspace_id": self.other_workspace.pk}))
        response = self.client.get("/memories/")
        assert str(self.other_workspace.pk) in response["Location"]

    def test_operator_without_workspace_is_told_what_to_do(self):
        from django.contrib.auth import get_user_model

        loner = get_user_model().objects.create_user("loner", password=PASSWORD)
        self.login(loner)
        response = self.client.get("/memories/")
        assert response.status_code == 200
        assert b"No workspace yet" in response.content

    def test_outsider_gets_404_for_another_workspace(self):
        self.login(self.outsider)
        response = self.client.get(reverse("memories:workspace", kwargs={"workspace_id": self.workspace.pk}))
        assert response.status_code == 404


class WorkspaceSwitcherTests(MemoryTestCase):
    def test_switcher_lists_every_workspace_of_the_operator_and_keeps_the_page(self):
        membership_set(workspace=self.other_workspace, user=self.owner, role=Membership.Role.ADMIN)
        self.login(self.owner)
        response = self.client.get(reverse("memories:members", kwargs={"workspace_id": self.workspace.pk}))
        content = response.content.decode()
        assert 'aria-label="Switch workspace (current: Acme)"' in content
        other = reverse("memories:members", kwargs={"workspace_id": self.other_workspace.pk})
        assert f'href="{other}"' in content

    def test_single_workspace_shows_no_menu(self):
        self.login(self.owner)
        response = self.client.get(reverse("memories:members", kwargs={"workspace_id": self.workspace.pk}))
        assert b"Switch workspace" not in response.content
        assert b"Acme" in response.content

    def test_responses_vary_on_htmx_headers(self):
        self.login(self.owner)
        response = self.client.get(reverse("memories:members", kwargs={"workspace_id": self.workspace.pk}))
        assert "HX-Request" in response["Vary"]

    def test_assets_are_served_locally(self):
        self.login(self.owner)
        response = self.client.get(reverse("memories:members", kwargs={"workspace_id": self.workspace.pk}))
        content = response.content.decode()
        assert "/static/django_htmx/htmx-2.min.js" in content
        assert "/static/memories/memories.css" in content
        assert "https://" not in content


class SuperuserTests(MemoryTestCase):
    def test_superuser_administers_any_workspace_without_membership(self):
        from django.contrib.auth import get_user_model

        root = get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
        self.login(root)
        url = reverse("memories:members", kwargs={"workspace_id": self.other_workspace.pk})
        response = self.client.get(url)
        assert response.status_code == 200
        assert b"outsider" in response.content
        assert b'aria-label="Switch workspace (current: Globex)"' in response.content
