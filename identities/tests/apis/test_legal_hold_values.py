"""Hostile `placed_on` values on the legal-hold routes: each is a 4xx naming the parameter,
and no hold is released by one."""

import uuid

from core.testing import MemoryTestCase
from identities.models import MemoryUser
from identities.services import memory_user_hold_place
from identities.tests.factories import MemoryUserFactory


class PlacedOnValuesTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        memory_user_hold_place(memory_user=self.ada, reason="Case 114", actor="test")
        self.url = f"/api/v1/memory-users/{self.ada.pk}/legal-hold/"

    def _held(self) -> bool:
        return MemoryUser.objects.get(pk=self.ada.pk).legal_hold_at is not None

    def test_values_that_are_not_ids_are_a_400_naming_placed_on(self):
        for value in ["", "abc", "1" * 5000, f"{self.ada.pk}x", "' OR 1=1 --"]:
            response = self.api().delete(f"{self.url}?placed_on={value}")
            assert response.status_code == 400, (value, response.status_code)
            assert "placed_on" in response.json()["error"]["fields"], value
        # A NUL is refused before any view, for every route.
        response = self.api().delete(f"{self.url}?placed_on={self.ada.pk}%00")
        assert (response.status_code, response.json()["error"]["code"]) == (400, "malformed_request")
        assert self._held()

    def test_an_unknown_parameter_is_a_400(self):
        response = self.api().delete(f"{self.url}?placed=x")
        assert response.status_code == 400
        assert self._held()

    def test_ids_of_no_hold_of_this_person_are_a_404(self):
        outsider = MemoryUserFactory(workspace=self.other_workspace)
        bo = MemoryUserFactory(workspace=self.workspace)
        for other in (uuid.uuid4(), outsider.pk, bo.pk):
            response = self.api().delete(f"{self.url}?placed_on={other}")
            assert response.status_code == 404, (other, response.json())
            assert response.json()["error"]["fields"] == {"placed_on": [response.json()["error"]["message"]]}
        assert self._held()

    def test_get_ignores_a_placed_on_it_does_not_read(self):
        response = self.api().get(f"{self.url}?placed_on=abc")
        assert response.status_code == 200
        assert [hold["placed_on"] for hold in response.json()["legal_holds"]] == [str(self.ada.pk)]

    def test_a_read_only_key_cannot_release(self):
        response = self.api(self.read_only_key).delete(self.url)
        assert response.status_code == 403
        assert self._held()
