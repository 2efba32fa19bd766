"""Legal holds after a merge in /memories: the person page lists and releases every hold that
covers the person, the Retention tab leads each hold to that page, and every erasure the
browser offers shows a merged record's refusal with a link to its survivor."""

from django.contrib.messages import get_messages

from browser.selectors import operator_context
from browser.tests.base import BrowserTestCase
from core.errors import ConflictError
from core.models import AuditEvent
from identities.models import MemoryUser
from identities.services import (
    MERGED_RECORD_ERASE,
    UNDER_LEGAL_HOLD,
    memory_user_hold_place,
    memory_user_merge,
)
from identities.tests.factories import MemoryUserFactory


class MergedHoldsCase(BrowserTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:teammate")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")

    def held(self) -> set:
        return set(MemoryUser.objects.filter(legal_hold_at__isnull=False).values_list("pk", flat=True))

    def release(self, person, data, *, htmx=True):
        url = self.url("memories:user-hold-release", pk=person.pk)
        if htmx:
            return self.htmx("post", url, data, target="person-holds")
        return self.client.post(url, data)


class PersonPageHoldsTests(MergedHoldsCase):
    def test_the_survivors_page_lists_every_hold_own_first(self):
        """Before: the person page showed no legal hold at all, so the merged record's hold,
        which still blocks retention and erasure of the survivor's rows, was invisible."""
        page = self.open_as(self.owner, self.url("memories:user", pk=self.ada.pk)).content.decode()

        assert 'id="person-holds"' in page
        own, merged = (
            page.index(f'data-placed-on="{self.ada.pk}"'),
            page.index(f'data-placed-on="{self.bo.pk}"'),
        )
        assert own < merged
        for text in ("Case 1", "Case 2", "operator:owner", "operator:teammate", "merged into this person"):
            assert text in page
        assert page.count('name="placed_on"') == 2
        assert f'href="{self.url("memories:user", pk=self.bo.pk)}"' in page

    def test_only_admins_get_release_buttons(self):
        for user in (self.viewer, self.teammate):
            page = self.open_as(user, self.url("memories:user", pk=self.ada.pk)).content.decode()
            assert "Case 2" in page and 'name="placed_on"' not in page
            assert self.release(self.ada, {"placed_on": str(self.bo.pk)}).status_code == 403
        assert self.held() == {self.ada.pk, self.bo.pk}

    def test_release_of_the_merged_records_hold_happens_on_the_survivor(self):
        self.login(self.owner)

        response = self.release(self.ada, {"placed_on": str(self.bo.pk)})

        assert response.status_code == 200
        body = response.content.decode()
        assert "<html" not in body and "Case 1" in body and "Case 2" not in body
        assert self.held() == {self.ada.pk}
        event = AuditEvent.objects.get(entity_id=str(self.bo.pk), changes__legal_hold__after=None)
        assert event.changes["released_on"] == str(self.ada.pk)
        assert "Case 2" in response["HX-Trigger"]

        blank = self.release(self.ada, {}, htmx=False)
        assert blank.status_code == 302 and blank["Location"] == self.url("memories:user", pk=self.ada.pk)
        assert self.held() == set()

    def test_the_merged_records_page_releases_its_hold_on_the_survivor(self):
        self.login(self.owner)
        page = self.client.get(self.url("memories:user", pk=self.bo.pk)).content.decode()
        assert "Case 2" in page and "Case 1" not in page

        response = self.release(self.bo, {"placed_on": str(self.bo.pk)})

        assert response.status_code == 200
        assert self.held() == {self.ada.pk}
        event = AuditEvent.objects.get(entity_id=str(self.bo.pk), changes__legal_hold__after=None)
        assert event.changes["released_on"] == str(self.ada.pk)

    def test_a_hold_not_listed_on_the_page_is_refused_in_place_and_nothing_is_released(self):
        stranger = MemoryUserFactory(workspace=self.workspace)
        memory_user_hold_place(memory_user=stranger, reason="Case 3", actor="operator:owner")
        foreign = MemoryUserFactory(workspace=self.other_workspace)
        memory_user_hold_place(memory_user=foreign, reason="Case 4", actor="operator:owner")
        self.login(self.owner)

        from browser.views.person import HOLD_NOT_LISTED

        for placed_on in (stranger.pk, foreign.pk):
            response = self.release(self.ada, {"placed_on": str(placed_on)})
            # 200 so htmx swaps the holds with the refusal in place (htmx 2 swaps no 4xx).
            assert response.status_code == 200
            assert 'data-refusal="not_found"' in response.content.decode()
            assert HOLD_NOT_LISTED in response["HX-Trigger"]
            assert self.release(self.ada, {"placed_on": str(placed_on)}, htmx=False).status_code == 404
        # The merged record does not reach back to the survivor's own hold.
        back = self.release(self.bo, {"placed_on": str(self.ada.pk)})
        assert 'data-refusal="not_found"' in back.content.decode()
        assert self.held() == {self.ada.pk, self.bo.pk, stranger.pk, foreign.pk}

    def test_outsiders_and_other_workspaces_get_404(self):
        self.login(self.outsider)
        assert self.release(self.ada, {"placed_on": str(self.bo.pk)}).status_code == 404
        self.login(self.owner)
        url = self.url("memories:user-hold-release", pk=self.ada.pk)
        foreign_ws = url.replace(str(self.workspace.pk), str(self.other_workspace.pk))
        assert self.client.post(foreign_ws, {"placed_on": str(self.bo.pk)}).status_code == 404
        assert self.held() == {self.ada.pk, self.bo.pk}

    def test_hostile_placed_on_is_a_400_and_releases_nothing(self):
        self.login(self.owner)
        for value in ("not-a-uuid", "\x00", f"{self.bo.pk}\x00", "9" * 5000, "' OR 1=1 --"):
            for htmx in (True, False):
                response = self.release(self.ada, {"placed_on": value}, htmx=htmx)
                assert response.status_code == (200 if htmx else 400), (value, response.status_code)
                assert 'data-refusal="invalid"' in response.content.decode()
        assert self.held() == {self.ada.pk, self.bo.pk}

    def test_a_section_request_does_not_read_the_holds(self):
        """Only the page and the holds partial read the holds: a section's pager does not."""
        self.login(self.owner)
        section = self.htmx("get", self.url("memories:user", pk=self.ada.pk), target="person-facts")
        assert "person-holds-heading" not in section.content.decode()
        holds = self.htmx("get", self.url("memories:user", pk=self.ada.pk), target="person-holds")
        body = holds.content.decode()
        assert "<html" not in body and "Case 1" in body and "Case 2" in body


class RetentionTabHoldsTests(MergedHoldsCase):
    def test_a_merged_records_hold_is_listed_under_its_survivor(self):
        """Before: the hold on Bo was listed under Bo, whose page is an emptied record, and its
        release button released it on Bo instead of on the person it covers."""
        page = self.open_as(self.owner, self.url("memories:retention")).content.decode()

        rows = page.split('<tr id="legal-hold-')[1:]
        assert len(rows) == 2
        assert all(f'data-person="{self.ada.pk}"' in row for row in rows)
        assert rows[0].startswith(str(self.ada.pk)) and rows[1].startswith(str(self.bo.pk))
        release = self.url("memories:legal-hold-release", memory_user_id=self.ada.pk)
        assert all(f'action="{release}"' in row for row in rows)
        assert f'value="{self.bo.pk}"' in rows[1] and "placed on Bo, merged into Ada" in rows[1]

    def test_releasing_there_releases_the_merged_records_hold_on_the_survivor(self):
        self.login(self.owner)
        url = self.url("memories:legal-hold-release", memory_user_id=self.ada.pk)

        response = self.htmx("post", url, {"placed_on": str(self.bo.pk)})

        assert response.status_code == 200
        assert self.held() == {self.ada.pk}
        event = AuditEvent.objects.get(entity_id=str(self.bo.pk), changes__legal_hold__after=None)
        assert event.changes["released_on"] == str(self.ada.pk)
        assert self.htmx("post", url, {}).status_code == 200
        assert self.held() == set()

    def test_a_hold_of_another_person_or_a_hostile_value_releases_nothing(self):
        stranger = MemoryUserFactory(workspace=self.workspace)
        memory_user_hold_place(memory_user=stranger, reason="Case 3", actor="operator:owner")
        self.login(self.owner)
        url = self.url("memories:legal-hold-release", memory_user_id=self.ada.pk)

        refused = self.htmx("post", url, {"placed_on": str(stranger.pk)})
        assert refused.status_code == 200 and 'data-refusal="not_found"' in refused.content.decode()
        assert self.client.post(url, {"placed_on": str(stranger.pk)}).status_code == 404
        for value in ("nope", "\x00", "9" * 5000):
            refused = self.htmx("post", url, {"placed_on": value})
            assert refused.status_code == 200 and 'data-refusal="invalid"' in refused.content.decode()
            assert self.client.post(url, {"placed_on": value}).status_code == 400
        assert self.held() == {self.ada.pk, self.bo.pk, stranger.pk}


class ErasureRefusalTests(BrowserTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        self.ada_url = self.url("memories:user", pk=self.ada.pk)

    def test_the_person_page_erase_of_a_merged_record_links_the_survivor(self):
        """Before: the refusal was a bare line of text, and the preview offered the erasure."""
        self.login(self.owner)
        url = self.url("memories:user-erase", pk=self.bo.pk)

        preview = self.htmx("get", url, target="person-erase").content.decode()
        assert f'href="{self.ada_url}"' in preview and "erase Ada instead" in preview
        assert "Erase 0 rows" not in preview and 'hx-post="' not in preview
        response = self.htmx("post", url, target="person-erase")

        assert response.status_code == 200
        body = response.content.decode()
        assert MERGED_RECORD_ERASE.replace("`", "&#x60;") in body or MERGED_RECORD_ERASE in body
        assert f'<a href="{self.ada_url}">Open Ada</a>' in body
        page = self.client.get(url).content.decode()
        assert f'href="{self.ada_url}"' in page
        assert MemoryUser.objects.filter(pk=self.bo.pk, merged_into=self.ada).exists()

    def test_the_person_page_erase_of_a_held_person_links_their_holds(self):
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:owner")
        self.login(self.owner)
        url = self.url("memories:user-erase", pk=self.ada.pk)
        preview = self.htmx("get", url, target="person-erase").content.decode()
        assert "legal hold" in preview and f'href="{self.ada_url}#person-holds"' in preview

        response = self.htmx("post", url, target="person-erase")

        body = response.content.decode()
        assert UNDER_LEGAL_HOLD in body and f'<a href="{self.ada_url}">Open Ada</a>' in body
        assert MemoryUser.objects.filter(pk__in=[self.ada.pk, self.bo.pk]).count() == 2

    def test_the_users_tab_batch_delete_links_the_survivor(self):
        """Before: the refusal was a toast with the message only."""
        self.login(self.owner)
        url = self.url("memories:users-delete")

        response = self.htmx("post", url, {"ids": [str(self.bo.pk)], "confirmed": "on"}, target="results")

        body = response.content.decode()
        assert response.status_code == 200 and 'data-refusal="merged"' in body
        assert f'<a href="{self.ada_url}">Erase Ada instead</a>' in body
        assert MERGED_RECORD_ERASE in response["HX-Trigger"]

        # Without htmx: the refusal's 409 with the whole tab, the same links in place.
        plain = self.client.post(url, {"ids": [str(self.bo.pk)], "confirmed": "on"})
        page = plain.content.decode()
        assert plain.status_code == 409 and "<html" in page and 'data-refusal="merged"' in page
        assert f'<a href="{self.ada_url}">Erase Ada instead</a>' in page
        assert MERGED_RECORD_ERASE in [str(m) for m in get_messages(plain.wsgi_request)]
        assert MemoryUser.objects.filter(pk=self.bo.pk, merged_into=self.ada).exists()
        assert not AuditEvent.objects.filter(action="erase").exists()

    def test_the_users_tab_batch_delete_of_a_held_person_links_their_holds(self):
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:owner")
        self.login(self.owner)

        response = self.htmx(
            "post", self.url("memories:users-delete"), {"ids": [str(self.ada.pk)]}, target="results"
        )

        body = response.content.decode()
        assert 'data-refusal="legal_hold"' in body
        assert f'<a href="{self.ada_url}">Legal holds of Ada</a>' in body
        assert MemoryUser.objects.filter(pk__in=[self.ada.pk, self.bo.pk]).count() == 2

    def test_a_foreign_id_in_a_refusal_is_not_linked(self):
        from browser.selectors.person import erase_refusal_people

        foreign = MemoryUserFactory(workspace=self.other_workspace)
        refusal = ConflictError(
            MERGED_RECORD_ERASE,
            code="merged",
            fields={"merged_into": [str(foreign.pk), "x", str(self.ada.pk)]},
        )
        principal = operator_context(user=self.owner, workspace_id=self.workspace.pk).principal

        assert [p.pk for p in erase_refusal_people(principal=principal, refusal=refusal)] == [self.ada.pk]
