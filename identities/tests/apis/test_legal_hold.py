"""Issue 14: a legal hold per person keeps everything of theirs, so erasure is refused until it
is released (the retention engine's side is tested in retention/tests)."""

import uuid

from core.models import AuditEvent
from core.testing import MemoryTestCase
from identities import services
from identities.models import MemoryUser
from identities.services import UNDER_LEGAL_HOLD, memory_user_hold_place, memory_user_merge
from identities.tests.factories import MemoryUserFactory
from threads.models import Thread
from threads.tests.factories import append, make_thread


class LegalHoldApiTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada")
        self.bo = MemoryUserFactory(workspace=self.workspace, display_name="Bo")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        append(self.thread, ("user", "Keep this."))
        self.url = f"/api/v1/memory-users/{self.ada.pk}/legal-hold/"

    def test_a_held_person_cannot_be_erased_until_released(self):
        response = self.api().post(self.url, {"reason": "Case 114: preserve"}, format="json")
        assert response.status_code == 200, response.json()
        hold = response.json()["legal_hold"]
        assert hold["reason"] == "Case 114: preserve" and hold["by"].startswith("api_key:") and hold["at"]
        assert self.api().get(f"/api/v1/memory-users/{self.ada.pk}/").json()["legal_hold"] == hold

        erase = self.api().delete(f"/api/v1/memory-users/{self.ada.pk}/")
        assert erase.status_code == 409
        assert erase.json()["error"]["code"] == "legal_hold"
        assert erase.json()["error"]["message"] == UNDER_LEGAL_HOLD
        batch = self.api().post(
            "/api/v1/memory-users/batch-delete/", {"ids": [str(self.bo.pk), str(self.ada.pk)]}, format="json"
        )
        assert batch.status_code == 409 and batch.json()["error"]["fields"]["ids"] == [str(self.ada.pk)]
        # All or nothing: Bo is still there too.
        assert MemoryUser.objects.filter(pk__in=[self.ada.pk, self.bo.pk]).count() == 2
        assert Thread.objects.filter(pk=self.thread.pk).exists()

        released = self.api().delete(self.url)
        assert released.status_code == 200 and released.json()["legal_hold"] is None
        assert self.api().delete(f"/api/v1/memory-users/{self.ada.pk}/").status_code == 200
        assert not Thread.objects.filter(pk=self.thread.pk).exists()

    def test_a_hold_on_a_person_merged_into_another_blocks_erasing_that_other(self):
        self.api().post(
            f"/api/v1/memory-users/{self.bo.pk}/legal-hold/", {"reason": "Preserve"}, format="json"
        )
        merged = self.api().post(
            f"/api/v1/memory-users/{self.bo.pk}/merge/", {"target": str(self.ada.pk)}, format="json"
        )
        assert merged.status_code == 200, merged.json()
        assert self.api().delete(f"/api/v1/memory-users/{self.ada.pk}/").status_code == 409

    def test_placing_again_replaces_the_reason_and_everything_is_audited(self):
        self.api().post(self.url, {"reason": "First"}, format="json")
        first_at = MemoryUser.objects.get(pk=self.ada.pk).legal_hold_at
        self.api().post(self.url, {"reason": "Second"}, format="json")
        self.api().delete(self.url)
        self.api().delete(self.url)  # releasing twice changes nothing
        held = MemoryUser.objects.get(pk=self.ada.pk)
        assert held.legal_hold_at is None and held.legal_hold_reason == ""
        changes = list(
            AuditEvent.objects.filter(entity_type="memory_user", entity_id=str(self.ada.pk))
            .order_by("id")
            .values_list("changes", flat=True)
        )
        assert [c["legal_hold"] for c in changes] == [
            {"before": None, "after": "First"},
            {"before": "First", "after": "Second"},
            {"before": "Second", "after": None},
        ]
        assert first_at is not None

    def test_bad_input_and_the_wrong_keys_are_refused(self):
        for body in ({}, {"reason": ""}, {"reason": "   "}, {"reason": "x" * 501}, {"reason": ["a"]}):
            response = self.api().post(self.url, body, format="json")
            assert response.status_code == 400, (body, response.json())
        assert self.api(self.agent_key).post(self.url, {"reason": "r"}, format="json").status_code == 403
        assert self.api(self.read_only_key).post(self.url, {"reason": "r"}, format="json").status_code == 403
        outsider = self.api(self.outsider_key).post(self.url, {"reason": "r"}, format="json")
        assert outsider.status_code == 404
        assert MemoryUser.objects.get(pk=self.ada.pk).legal_hold_at is None

    def test_hostile_placed_on_values_are_refused_and_release_nothing(self):
        """`placed_on` of a release is an id from the query string: malformed is a 400, one of
        another workspace or one not merged into the person the same 404 as a random id."""
        memory_user_hold_place(memory_user=self.ada, reason="Case 1", actor="operator:owner")
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:owner")
        foreign = MemoryUserFactory(workspace=self.other_workspace)
        memory_user_hold_place(memory_user=foreign, reason="Case 3", actor="operator:outsider")
        for query in ("placed_on=not-a-uuid", "placed_on=", "other=1", "placed_on=1e9"):
            response = self.api().delete(self.url, QUERY_STRING=query)
            assert response.status_code == 400, (query, response.content)
            assert response.json()["error"]["code"] == "invalid"
        for placed_on in (uuid.uuid4(), foreign.pk, self.bo.pk):
            response = self.api().delete(self.url, QUERY_STRING=f"placed_on={placed_on}")
            assert response.status_code == 404, (placed_on, response.content)
            assert response.json()["error"]["fields"] == {"placed_on": [services.LEGAL_HOLD_NOT_FOUND]}
        assert MemoryUser.objects.filter(legal_hold_at__isnull=False).count() == 3

    def test_holds_of_a_merged_record_are_listed_and_released_by_workspace_keys_only(self):
        memory_user_hold_place(memory_user=self.bo, reason="Case 2", actor="operator:owner")
        memory_user_merge(source=self.bo, target=self.ada, actor="operator:owner")
        release = {"QUERY_STRING": f"placed_on={self.bo.pk}"}

        for key in (self.agent_key, self.read_only_key):
            listed = self.api(key).get(self.url)
            assert listed.status_code == 200 and len(listed.json()["legal_holds"]) == 2
            assert self.api(key).delete(self.url, **release).status_code == 403
        outsider = self.api(self.outsider_key)
        assert outsider.get(self.url).status_code == 404
        assert outsider.delete(self.url, **release).status_code == 404
        # An outsider naming its own person as the survivor does not reach this workspace's record.
        foreign = MemoryUserFactory(workspace=self.other_workspace)
        crossed = outsider.delete(f"/api/v1/memory-users/{foreign.pk}/legal-hold/", **release)
        assert crossed.status_code == 404
        assert MemoryUser.objects.get(pk=self.bo.pk).legal_hold_at is not None
