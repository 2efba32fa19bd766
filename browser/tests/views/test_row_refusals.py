"""A refused row action of /memories answers a plain post with the refusal's own status.

The buttons of a row or of the selection (batch delete, review approve/reject/merge, a member's
role and removal, Erase, a hold's release) answered a refused plain post (JavaScript off, a
script) with a redirect and a flash message: a 302 like a stored write, so a client could not
tell the two apart. Now a plain post gets the refusal's 4xx with the whole page saying why; htmx
keeps its 200 with the reason toasted (htmx 2 swaps no 4xx), and a write that goes through
still redirects after the post.
"""

from unittest import mock

from browser.forms import IDS_REQUIRED
from browser.services import LAST_ADMIN
from browser.tests.base import BrowserTestCase
from browser.tests.factories import memory_user_make
from browser.views import review as review_view
from browser.views.person import HOLD_NOT_LISTED
from browser.views.review import NO_MERGE_TARGET, NOTHING_SELECTED
from core.models import Membership
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import UNDER_LEGAL_HOLD, memory_user_hold_place
from review.selectors import TIER_ENTRY
from review.services import review_approve


class RowRefusalCase(BrowserTestCase):
    def assert_refused_page(self, response, text: str, status: int):
        body = response.content.decode()
        assert response.status_code == status, response.status_code
        assert "<html" in body, "a plain post gets the whole page"
        assert text in body, text
        # Shown in this page, so it is not shown again on the next one.
        assert text not in self.client.get(self.url("memories:overview")).content.decode()

    def assert_toasted(self, response, text: str):
        assert response.status_code == 200, response.status_code
        assert text in response["HX-Trigger"] and '"level": "error"' in response["HX-Trigger"]


class BatchDeleteRefusalTests(RowRefusalCase):
    def setUp(self):
        self.ada = memory_user_make(self.workspace)
        self.fact = fact_remember(workspace=self.workspace, key="tea", value="green", scope="global").fact

    def test_a_batch_delete_with_nothing_selected_is_a_400(self):
        self.login(self.teammate)
        url = self.url("memories:facts-delete") + "?q=tea"

        plain = self.client.post(url, {"confirmed": "on"})
        htmx = self.htmx("post", url, {}, target="results")

        self.assert_refused_page(plain, IDS_REQUIRED, 400)
        # The whole tab with its filters as they were.
        assert 'value="tea"' in plain.content.decode()
        self.assert_toasted(htmx, IDS_REQUIRED)
        assert Fact.objects.filter(pk=self.fact.pk).exists()

    def test_erasing_a_held_person_from_the_users_tab_is_a_409_with_the_refusal_in_place(self):
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        self.login(self.owner)
        url = self.url("memories:users-delete")
        data = {"ids": [str(self.ada.pk)], "confirmed": "on"}

        plain = self.client.post(url, data)
        htmx = self.htmx("post", url, data, target="results")

        self.assert_refused_page(plain, UNDER_LEGAL_HOLD, 409)
        assert "Nothing was erased." in plain.content.decode()
        assert self.url("memories:user", pk=self.ada.pk) in plain.content.decode()
        self.assert_toasted(htmx, UNDER_LEGAL_HOLD)
        assert MemoryUser.objects.filter(pk=self.ada.pk).exists()

    def test_a_batch_delete_that_goes_through_still_redirects(self):
        self.login(self.teammate)
        response = self.client.post(
            self.url("memories:facts-delete"), {"ids": [str(self.fact.pk)], "confirmed": "on"}
        )
        assert response.status_code == 302 and response["Location"] == self.url("memories:facts")
        assert not Fact.objects.filter(pk=self.fact.pk).exists()


class ReviewDecideRefusalTests(RowRefusalCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        person = memory_user_make(self.workspace)
        self.held = entry_create(
            agent=self.agent, memory_user=person, content="Ada is learning Portuguese.", actor="t"
        ).entry
        self.login(self.teammate)
        self.decide = self.url("memories:review-decide")

    def test_deciding_nothing_is_a_400(self):
        plain = self.client.post(self.decide, {"action": "approve"})
        htmx = self.htmx("post", self.decide, {"action": "approve"}, target="review-results")

        self.assert_refused_page(plain, NOTHING_SELECTED, 400)
        self.assert_toasted(htmx, NOTHING_SELECTED)

    def test_a_merge_refused_for_every_item_is_the_refusals_status(self):
        data = {"items": f"entry:{self.held.pk}", "action": "merge"}

        plain = self.client.post(self.decide, data)
        htmx = self.htmx("post", self.decide, data, target="review-results")

        self.assert_refused_page(plain, NO_MERGE_TARGET, 400)
        # The queue as it is, the refused item still in it.
        assert "Ada is learning Portuguese." in plain.content.decode()
        self.assert_toasted(htmx, NO_MERGE_TARGET)
        assert EpisodicEntry.objects.get(pk=self.held.pk).review == "held"

    def test_an_approval_that_goes_through_still_redirects(self):
        response = self.client.post(self.decide, {"items": f"entry:{self.held.pk}", "action": "approve"})
        assert response.status_code == 302 and response["Location"] == self.url("memories:review")
        assert EpisodicEntry.objects.get(pk=self.held.pk).review != "held"

    def test_an_item_decided_between_the_read_and_the_lock_refuses_nothing(self):
        """Another operator's approval (or a second click) lands after the view read the queue
        and before the decision locked the item: the service's 409 is no refusal of this post,
        which redirects like one whose read found the item decided."""
        read = review_view.review_items_named

        def read_then_decided_elsewhere(**kwargs):
            items = read(**kwargs)
            review_approve(principal=kwargs["principal"], tier=TIER_ENTRY, item_id=self.held.pk)
            return items

        with mock.patch.object(review_view, "review_items_named", read_then_decided_elsewhere):
            response = self.client.post(self.decide, {"items": f"entry:{self.held.pk}", "action": "approve"})

        assert response.status_code == 302


class MemberRefusalTests(RowRefusalCase):
    def setUp(self):
        self.login(self.owner)
        self.own = Membership.objects.get(user=self.owner, workspace=self.workspace)

    def test_an_unknown_role_is_a_400(self):
        viewer = Membership.objects.get(user=self.viewer, workspace=self.workspace)
        url = self.url("memories:member-role", membership_id=viewer.pk)

        plain = self.client.post(url, {"role": "emperor"})
        htmx = self.htmx("post", url, {"role": "emperor"}, target="members-list")

        self.assert_refused_page(plain, "Unknown role.", 400)
        self.assert_toasted(htmx, "Unknown role.")
        assert Membership.objects.get(pk=viewer.pk).role == Membership.Role.VIEWER

    def test_the_last_admin_demoting_or_removing_themselves_is_refused_with_its_status(self):
        role = self.client.post(
            self.url("memories:member-role", membership_id=self.own.pk), {"role": "viewer"}
        )
        remove = self.client.post(self.url("memories:member-remove", membership_id=self.own.pk))

        self.assert_refused_page(role, LAST_ADMIN, 400)
        self.assert_refused_page(remove, LAST_ADMIN, 400)
        assert Membership.objects.get(pk=self.own.pk).role == Membership.Role.ADMIN


class PersonRefusalTests(RowRefusalCase):
    def setUp(self):
        self.ada = memory_user_make(self.workspace)
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        self.login(self.owner)

    def test_erasing_a_held_person_is_a_409_on_the_erase_page(self):
        url = self.url("memories:user-erase", pk=self.ada.pk)

        plain = self.client.post(url)
        htmx = self.htmx("post", url, target="person-erase")

        self.assert_refused_page(plain, UNDER_LEGAL_HOLD, 409)
        assert "data-refusal" in plain.content.decode()
        self.assert_toasted(htmx, UNDER_LEGAL_HOLD)
        assert MemoryUser.objects.filter(pk=self.ada.pk).exists()

    def test_releasing_a_hold_the_page_does_not_list_is_a_404_on_the_person_page(self):
        stranger = memory_user_make(self.workspace, canonical_id="slack:U9", display_name="Stranger")
        memory_user_hold_place(memory_user=stranger, reason="Case 2", actor="operator:owner")
        url = self.url("memories:user-hold-release", pk=self.ada.pk)

        plain = self.client.post(url, {"placed_on": str(stranger.pk)})
        invalid = self.client.post(url, {"placed_on": "not-a-uuid"})

        self.assert_refused_page(plain, HOLD_NOT_LISTED, 404)
        assert 'data-refusal="not_found"' in plain.content.decode() and "Case 1" in plain.content.decode()
        assert invalid.status_code == 400 and 'data-refusal="invalid"' in invalid.content.decode()
        assert set(MemoryUser.objects.filter(legal_hold_at__isnull=False).values_list("pk", flat=True)) == {
            self.ada.pk,
            stranger.pk,
        }

    def test_a_release_that_goes_through_still_redirects(self):
        response = self.client.post(self.url("memories:user-hold-release", pk=self.ada.pk), {"placed_on": ""})
        assert response.status_code == 302 and response["Location"] == self.url(
            "memories:user", pk=self.ada.pk
        )
        assert not MemoryUser.objects.filter(legal_hold_at__isnull=False).exists()
