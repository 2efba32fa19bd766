"""Releasing a legal hold in /memories when the release is refused, and holds along chains of
merges (older data: Ann merged into Bo, later Bo into Cy).

A refused release over htmx swaps the holds as they are now with the reason in place (a 200:
htmx 2 swaps no 4xx), so the page stops showing a hold that is gone."""

from unittest import mock

from browser.tests.base import BrowserTestCase
from browser.views.person import HOLD_NOT_LISTED
from browser.views.retention import HOLD_UNKNOWN
from core.errors import ConflictError
from core.models import AuditEvent
from identities.models import MemoryUser
from identities.services import (
    MERGED_RECORD_ERASE,
    memory_user_hold_place,
    memory_user_hold_release,
    memory_user_merge,
)
from identities.tests.factories import MemoryUserFactory


def refusal_of(body: str) -> str:
    """The `data-refusal` code of the inline error, or "" when there is none."""
    marker = 'role="alert" data-refusal="'
    return body.split(marker, 1)[1].split('"', 1)[0] if marker in body else ""


class HoldReleaseRefusalTests(BrowserTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:owner")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        self.login(self.owner)

    def release(self, data):
        url = self.url("memories:user-hold-release", pk=self.ada.pk)
        return self.htmx("post", url, data, target="person-holds")

    def held(self) -> set:
        return set(MemoryUser.objects.filter(legal_hold_at__isnull=False).values_list("pk", flat=True))

    def test_a_hold_released_meanwhile_is_swapped_out_with_the_reason_in_place(self):
        """Before: a 404 with only a toast; htmx swapped nothing and the page went on listing
        Case 2 with its Release button."""
        memory_user_hold_release(memory_user=self.ada, placed_on=self.bo, actor="operator:teammate")

        response = self.release({"placed_on": str(self.bo.pk)})

        assert response.status_code == 200
        body = response.content.decode()
        assert "<html" not in body and 'id="person-holds-heading"' in body
        assert refusal_of(body) == "not_found" and HOLD_NOT_LISTED in body
        assert "Case 1" in body and "Case 2" not in body
        assert 'data-total="1"' in body
        assert HOLD_NOT_LISTED in response["HX-Trigger"]
        assert self.held() == {self.ada.pk}

    def test_a_malformed_placed_on_shows_the_form_error_over_the_unchanged_holds(self):
        for value in ("not-a-uuid", "\x00", "9" * 5000):
            response = self.release({"placed_on": value})

            assert response.status_code == 200, value
            body = response.content.decode()
            assert refusal_of(body) == "invalid", value
            assert "Case 1" in body and "Case 2" in body
        assert self.held() == {self.ada.pk, self.bo.pk}

    def test_a_service_refusal_keeps_its_code_in_place(self):
        refused = ConflictError("A merge of this person is under way.", code="merge_running")
        with mock.patch("browser.views.person.memory_user_hold_release", side_effect=refused):
            response = self.release({"placed_on": str(self.bo.pk)})

        body = response.content.decode()
        assert response.status_code == 200
        assert refusal_of(body) == "merge_running" and "A merge of this person is under way." in body
        assert "Case 1" in body and "Case 2" in body

    def test_without_htmx_the_refusal_is_a_404_on_the_person_page(self):
        url = self.url("memories:user-hold-release", pk=self.ada.pk)
        response = self.client.post(url, {"placed_on": str(self.other_workspace.pk)})
        page = response.content.decode()
        assert response.status_code == 404 and "<html" in page
        assert refusal_of(page) == "not_found" and HOLD_NOT_LISTED in page
        assert "Case 1" in page and "Case 2" in page

    def test_a_release_that_goes_through_has_no_inline_error(self):
        response = self.release({"placed_on": str(self.bo.pk)})
        assert response.status_code == 200 and refusal_of(response.content.decode()) == ""
        assert self.held() == {self.ada.pk}

    def test_the_retention_tab_shows_the_refusal_in_place_too(self):
        """Before: the Retention tab answered 400 or 404 there and htmx swapped nothing."""
        url = self.url("memories:legal-hold-release", memory_user_id=self.ada.pk)
        memory_user_hold_release(memory_user=self.ada, placed_on=self.bo, actor="operator:teammate")

        gone = self.htmx("post", url, {"placed_on": str(self.bo.pk)})
        malformed = self.htmx("post", url, {"placed_on": "nope"})

        for response, code in ((gone, "not_found"), (malformed, "invalid")):
            body = response.content.decode()
            assert response.status_code == 200 and refusal_of(body) == code
            assert 'id="legal-holds"' in body and "Case 1" in body and "Case 2" not in body
        assert HOLD_UNKNOWN in gone.content.decode()
        # A plain form post keeps the refusal's status.
        assert self.client.post(url, {"placed_on": str(self.bo.pk)}).status_code == 404
        assert self.held() == {self.ada.pk}


class MergeChainPagesTests(BrowserTestCase):
    """Ann merged into Bo, later Bo into Cy, as an earlier release left them."""

    def setUp(self):
        self.ann, self.bo, self.cy = (
            MemoryUserFactory(workspace=self.workspace, display_name=name) for name in ("Ann", "Bo", "Cy")
        )
        MemoryUser.objects.filter(pk=self.ann.pk).update(merged_into=self.bo)
        MemoryUser.objects.filter(pk=self.bo.pk).update(merged_into=self.cy)
        memory_user_hold_place(memory_user=self.ann, reason="Case 7", actor="operator:owner")
        self.login(self.owner)

    def test_the_survivors_page_lists_and_releases_the_hold_placed_two_merges_back(self):
        """Before: Cy's page listed no hold (only records merged into Cy directly), though
        Ann's hold blocks Cy's erasure."""
        page = self.client.get(self.url("memories:user", pk=self.cy.pk)).content.decode()
        assert f'data-placed-on="{self.ann.pk}"' in page and "Case 7" in page

        url = self.url("memories:user-hold-release", pk=self.cy.pk)
        response = self.htmx("post", url, {"placed_on": str(self.ann.pk)}, target="person-holds")

        assert response.status_code == 200 and refusal_of(response.content.decode()) == ""
        assert not MemoryUser.objects.filter(legal_hold_at__isnull=False).exists()

    def test_a_merged_records_page_names_and_releases_on_the_final_survivor(self):
        """Before: Ann's page said she was merged into Bo, itself merged, and released her
        hold on Bo."""
        page = self.client.get(self.url("memories:user", pk=self.ann.pk)).content.decode()
        assert f'data-merged-into="{self.cy.pk}"' in page

        url = self.url("memories:user-hold-release", pk=self.ann.pk)
        response = self.htmx("post", url, {"placed_on": str(self.ann.pk)}, target="person-holds")

        assert response.status_code == 200 and refusal_of(response.content.decode()) == ""
        event = AuditEvent.objects.get(entity_id=str(self.ann.pk), changes__legal_hold__after=None)
        assert event.changes["released_on"] == str(self.cy.pk)

    def test_the_retention_tab_lists_the_hold_under_the_final_survivor(self):
        page = self.client.get(self.url("memories:retention")).content.decode()
        row = page.split(f'<tr id="legal-hold-{self.ann.pk}"', 1)[1].split("</tr>", 1)[0]
        assert f'data-person="{self.cy.pk}"' in row and "placed on Ann, merged into Cy" in row

        url = self.url("memories:legal-hold-release", memory_user_id=self.cy.pk)
        response = self.htmx("post", url, {"placed_on": str(self.ann.pk)})

        assert response.status_code == 200 and refusal_of(response.content.decode()) == ""
        assert not MemoryUser.objects.filter(legal_hold_at__isnull=False).exists()

    def test_erasing_a_record_of_the_chain_links_the_final_survivor(self):
        MemoryUser.objects.update(legal_hold_at=None)
        url = self.url("memories:user-erase", pk=self.ann.pk)

        response = self.htmx("post", url, {}, target="main")

        body = response.content.decode()
        assert MERGED_RECORD_ERASE in body
        assert f'href="{self.url("memories:user", pk=self.cy.pk)}"' in body
        assert f'href="{self.url("memories:user", pk=self.bo.pk)}"' not in body
        assert MemoryUser.objects.filter(pk__in=[self.ann.pk, self.bo.pk, self.cy.pk]).count() == 3
