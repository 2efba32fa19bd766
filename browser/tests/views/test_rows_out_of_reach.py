"""Ids of rows outside the operator's workspace (or already gone) on the admin pages: a 404,
as for a row that does not exist, never a 500, and nothing changes."""

import uuid

from django.urls import reverse

from browser.tests.base import BrowserTestCase
from core.access import principal_for_api_key
from core.models import Membership
from retention.models import RetentionRule
from webhooks.models import WebhookSubscription
from webhooks.services import webhook_subscription_create

WEBHOOK_PAGES = ("webhook", "webhook-toggle", "webhook-ping", "webhook-rotate", "webhook-delete")


class WebhookIdsOfAnotherWorkspaceTests(BrowserTestCase):
    def setUp(self):
        self.subscription = webhook_subscription_create(
            principal=principal_for_api_key(self.owner_api_key), url="https://example.com/hook"
        )[0]

    def test_an_outsider_naming_a_subscription_of_another_workspace_in_their_own_gets_404(self):
        # The outsider is an admin of other_workspace and puts this workspace's id in its URLs.
        self.login(self.outsider)
        for name in WEBHOOK_PAGES:
            url = reverse(
                f"memories:{name}",
                kwargs={"workspace_id": self.other_workspace.pk, "subscription_id": self.subscription.pk},
            )
            response = self.client.get(url) if name == "webhook" else self.client.post(url)
            assert response.status_code == 404, name
            response = self.htmx("get" if name == "webhook" else "post", url)
            # Pause, ping and rotate show the refusal in place for htmx (test_webhook_refusals).
            in_place = name in ("webhook-toggle", "webhook-ping", "webhook-rotate")
            assert response.status_code == (200 if in_place else 404), name
        subscription = WebhookSubscription.objects.get(pk=self.subscription.pk)
        assert subscription.is_active and subscription.workspace_id == self.workspace.pk

    def test_the_owner_opening_a_deleted_subscription_gets_404(self):
        self.login(self.owner)
        gone = uuid.uuid4()
        assert self.client.get(self.url("memories:webhook", subscription_id=gone)).status_code == 404
        assert self.client.post(self.url("memories:webhook-delete", subscription_id=gone)).status_code == 404
        assert WebhookSubscription.objects.count() == 1

    def test_a_teammate_and_a_viewer_still_get_403(self):
        for user in (self.teammate, self.viewer):
            self.login(user)
            url = self.url("memories:webhook-toggle", subscription_id=self.subscription.pk)
            assert self.client.post(url).status_code == 403


class RetentionRuleIdsTests(BrowserTestCase):
    def test_removing_a_rule_already_removed_or_of_another_workspace_is_a_404(self):
        self.login(self.owner)
        response = self.htmx(
            "post", self.url("memories:retention-rule-save"), {"tier": "episodes", "max_age_days": "30"}
        )
        assert response.status_code == 200
        rule = RetentionRule.objects.get()
        self.login(self.outsider)
        foreign = reverse(
            "memories:retention-rule-remove",
            kwargs={"workspace_id": self.other_workspace.pk, "rule_id": rule.pk},
        )
        assert self.htmx("post", foreign).status_code == 404
        assert RetentionRule.objects.filter(pk=rule.pk).exists()
        self.login(self.owner)
        url = self.url("memories:retention-rule-remove", rule_id=rule.pk)
        assert self.htmx("post", url).status_code == 200
        # A second click (a stale page, another admin) finds nothing to remove.
        assert self.htmx("post", url).status_code == 404
        assert self.client.post(url).status_code == 404


class MemberRemovesThemselfTests(BrowserTestCase):
    def test_an_admin_leaving_by_htmx_gets_hx_redirect_home(self):
        """Removing one's own membership from the members page (an htmx form) leaves nothing to
        show there: the browser loads /memories/ whole, with the message."""
        Membership.objects.filter(workspace=self.workspace, user=self.teammate).update(
            role=Membership.Role.ADMIN
        )
        mine = Membership.objects.get(workspace=self.workspace, user=self.teammate)
        self.login(self.teammate)
        response = self.htmx(
            "post", self.url("memories:member-remove", membership_id=mine.pk), target="members-list"
        )
        assert response.status_code == 200
        assert response["HX-Redirect"] == reverse("memories:home")
        assert not Membership.objects.filter(pk=mine.pk).exists()
        self.login(self.owner)
        assert Membership.objects.filter(workspace=self.workspace, user=self.owner).exists()

    def test_without_javascript_it_redirects_home(self):
        Membership.objects.filter(workspace=self.workspace, user=self.teammate).update(
            role=Membership.Role.ADMIN
        )
        mine = Membership.objects.get(workspace=self.workspace, user=self.teammate)
        self.login(self.teammate)
        response = self.client.post(self.url("memories:member-remove", membership_id=mine.pk))
        assert response.status_code == 302 and response["Location"] == reverse("memories:home")

    def test_an_outsider_cannot_remove_a_member_of_another_workspace(self):
        mine = Membership.objects.get(workspace=self.workspace, user=self.teammate)
        self.login(self.outsider)
        url = reverse(
            "memories:member-remove",
            kwargs={"workspace_id": self.other_workspace.pk, "membership_id": mine.pk},
        )
        assert self.htmx("post", url).status_code == 404
        assert Membership.objects.filter(pk=mine.pk).exists()
