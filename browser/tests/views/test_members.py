import re

from django.contrib.auth import get_user_model
from django.urls import reverse

from browser.services import ALREADY_MEMBER, LAST_ADMIN, MEMBER_ADD_REFUSED
from browser.tests.base import BrowserTestCase
from core.models import AuditEvent, Membership
from core.testing import PASSWORD


class MembersPageTests(BrowserTestCase):
    def url(self, name="memories:members", **kwargs):
        return reverse(name, kwargs={"workspace_id": self.workspace.pk, **kwargs})

    def test_admin_sees_every_member_in_bounded_queries(self):
        self.open_as(self.owner, self.url())
        # session, user, memberships, member list.
        with self.assertNumQueries(4):
            response = self.client.get(self.url())
        assert response.status_code == 200
        for name in (b"owner", b"teammate", b"viewer"):
            assert name in response.content
        assert b"outsider" not in response.content

    def test_fragment_for_htmx(self):
        self.login(self.owner)
        response = self.client.get(self.url(), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="main")
        assert response.status_code == 200
        assert b"<html" not in response.content
        assert b"Add a member" in response.content

    def test_editor_and_viewer_are_refused(self):
        for user in (self.teammate, self.viewer):
            self.login(user)
            assert self.client.get(self.url()).status_code == 403
            response = self.client.post(self.url("memories:member-add"), {"username": "x", "role": "viewer"})
            assert response.status_code == 403

    def test_non_admins_see_no_admin_links(self):
        self.login(self.teammate)
        response = self.client.get(reverse("memories:workspace", kwargs={"workspace_id": self.workspace.pk}))
        page = self.client.get(response["Location"])
        assert self.url().encode() not in page.content

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url()).status_code == 404
        membership = Membership.objects.get(user=self.teammate)
        response = self.client.post(
            self.url("memories:member-role", membership_id=membership.pk), {"role": "admin"}
        )
        assert response.status_code == 404
        assert Membership.objects.get(pk=membership.pk).role == Membership.Role.EDITOR

    def test_member_of_another_workspace_cannot_be_changed_from_here(self):
        self.login(self.owner)
        foreign = Membership.objects.get(user=self.outsider)
        response = self.client.post(self.url("memories:member-remove", membership_id=foreign.pk))
        assert response.status_code == 404
        assert Membership.objects.filter(pk=foreign.pk).exists()

    def test_admin_creates_an_operator_account(self):
        self.login(self.owner)
        response = self.client.post(
            self.url("memories:member-add"),
            {"username": "newbie", "role": "editor", "password": "a-long-password-1"},
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="main",
        )
        assert response.status_code == 200
        assert "newbie is now a editor" in response["HX-Trigger"] or "newbie" in response["HX-Trigger"]
        membership = Membership.objects.get(user__username="newbie", workspace=self.workspace)
        assert membership.role == Membership.Role.EDITOR
        assert AuditEvent.objects.filter(entity_type="membership", action="create").exists()
        assert self.client.login(username="newbie", password="a-long-password-1")

    def test_adding_an_existing_operator_never_touches_their_password(self):
        self.login(self.owner)
        response = self.client.post(
            self.url("memories:member-add"),
            {"username": "outsider", "role": "viewer", "password": "hijack-123456"},
        )
        assert MEMBER_ADD_REFUSED.encode() in response.content
        assert not Membership.objects.filter(user=self.outsider, workspace=self.workspace).exists()
        assert get_user_model().objects.get(username="outsider").check_password(PASSWORD)
        response = self.client.post(
            self.url("memories:member-add"), {"username": "outsider", "role": "viewer"}
        )
        assert response.status_code == 302
        assert Membership.objects.get(user=self.outsider, workspace=self.workspace).role == "viewer"

    def test_unknown_username_without_password_is_explained(self):
        self.login(self.owner)
        response = self.client.post(self.url("memories:member-add"), {"username": "ghost", "role": "viewer"})
        assert MEMBER_ADD_REFUSED.encode() in response.content
        assert not get_user_model().objects.filter(username="ghost").exists()

    def test_refusals_do_not_tell_another_workspaces_operators_apart_from_unknown_names(self):
        """'No such user' and 'user exists elsewhere' read the same (issue 11): the page must not
        let an admin find out which usernames other workspaces use."""
        self.login(self.owner)

        def refusal(username, password=""):
            data = {"username": username, "role": "viewer", "password": password}
            response = self.client.post(self.url("memories:member-add"), data)
            # The same status too: a plain post's refusal is the form's 400 either way.
            assert response.status_code == 400
            page = response.content.decode()
            # CSRF tokens are masked afresh on every render.
            page = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", page)
            page = re.sub(r'"X-CSRFToken": "[^"]*"', "", page)
            return page.replace(username, "NAME")

        unknown = refusal("ghost")
        taken = refusal("outsider", password="hijack-123456")
        assert MEMBER_ADD_REFUSED in unknown
        assert unknown == taken
        assert not get_user_model().objects.filter(username="ghost").exists()
        assert not Membership.objects.filter(user=self.outsider, workspace=self.workspace).exists()

    def test_adding_a_member_twice_is_refused(self):
        self.login(self.owner)
        response = self.client.post(self.url("memories:member-add"), {"username": "viewer", "role": "admin"})
        assert ALREADY_MEMBER.encode() in response.content
        assert Membership.objects.get(user=self.viewer, workspace=self.workspace).role == "viewer"

    def test_role_change(self):
        self.login(self.owner)
        membership = Membership.objects.get(user=self.viewer)
        response = self.client.post(
            self.url("memories:member-role", membership_id=membership.pk),
            {"role": "editor"},
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="members-list",
        )
        assert response.status_code == 200
        assert b"<table" in response.content
        assert b"Add a member" not in response.content
        assert Membership.objects.get(pk=membership.pk).role == Membership.Role.EDITOR

    def test_the_last_admin_cannot_demote_or_remove_themselves(self):
        self.login(self.owner)
        membership = Membership.objects.get(user=self.owner, workspace=self.workspace)
        response = self.client.post(
            self.url("memories:member-role", membership_id=membership.pk),
            {"role": "viewer"},
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="members-list",
        )
        assert LAST_ADMIN in response["HX-Trigger"]
        response = self.client.post(
            self.url("memories:member-remove", membership_id=membership.pk),
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="members-list",
        )
        assert LAST_ADMIN in response["HX-Trigger"]
        assert Membership.objects.get(pk=membership.pk).role == Membership.Role.ADMIN

    def test_remove_member(self):
        self.login(self.owner)
        membership = Membership.objects.get(user=self.viewer)
        response = self.client.post(self.url("memories:member-remove", membership_id=membership.pk))
        assert response.status_code == 302
        assert not Membership.objects.filter(pk=membership.pk).exists()
