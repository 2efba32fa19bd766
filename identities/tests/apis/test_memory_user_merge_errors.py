"""Every refused merge answers a machine-readable 4xx and moves nothing."""

import uuid

from core.testing import MemoryTestCase
from identities import services
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_hold_place, memory_user_merge
from identities.tests.factories import ChannelIdentityFactory, MemoryUserFactory

LIST = "/api/v1/memory-users/"


def merge_url(memory_user_id) -> str:
    return f"{LIST}{memory_user_id}/merge/"


class MergeApiErrorTests(MemoryTestCase):
    def setUp(self):
        self.source = MemoryUserFactory(workspace=self.workspace)
        self.target = MemoryUserFactory(workspace=self.workspace)
        ChannelIdentityFactory(memory_user=self.source, channel="email", external_id="ann@example.com")

    def post(self, source_id, body, key=None):
        return self.api(key).post(merge_url(source_id), body, format="json")

    def assert_nothing_moved(self):
        self.source.refresh_from_db()
        assert self.source.merged_into_id is None
        assert ChannelIdentity.objects.get(external_id="ann@example.com").memory_user_id == self.source.pk

    def test_bad_bodies_are_400_naming_the_field(self):
        for body in ({}, {"target": None}, {"target": "not-a-uuid"}, {"target": str(self.target.pk), "x": 1}):
            response = self.post(self.source.pk, body)
            assert response.status_code == 400, (body, response.content)
            assert response.json()["error"]["code"] == "invalid", body
        self.assert_nothing_moved()

    def test_unknown_and_foreign_people_are_404(self):
        foreign = MemoryUser.objects.create(workspace=self.other_workspace, canonical_id="x:1")
        for source_id, target_id in (
            (self.source.pk, uuid.uuid4()),
            (uuid.uuid4(), self.target.pk),
            (self.source.pk, foreign.pk),
        ):
            response = self.post(source_id, {"target": str(target_id)})
            assert response.status_code == 404, response.content
            assert response.json()["error"]["code"] == "not_found"
        outsider = self.post(self.source.pk, {"target": str(self.target.pk)}, key=self.outsider_key)
        assert outsider.status_code == 404
        self.assert_nothing_moved()

    def test_keys_that_may_not_merge_are_403(self):
        for key in (self.agent_key, self.read_only_key):
            response = self.post(self.source.pk, {"target": str(self.target.pk)}, key=key)
            assert response.status_code == 403, response.content
        self.assert_nothing_moved()

    def test_merges_the_model_refuses_are_400_with_the_reason(self):
        elsewhere = MemoryUserFactory(workspace=self.workspace)
        merged = MemoryUserFactory(workspace=self.workspace)
        memory_user_merge(source=merged, target=elsewhere, actor="system")
        for source_id, target_id, message in (
            (self.source.pk, self.source.pk, services.MERGE_INTO_SELF),
            (self.source.pk, merged.pk, services.MERGE_INTO_MERGED),
            (merged.pk, self.target.pk, services.MERGE_SOURCE_MERGED_ELSEWHERE),
        ):
            response = self.post(source_id, {"target": str(target_id)})
            assert response.status_code == 400, response.content
            assert response.json()["error"]["message"] == message
        self.assert_nothing_moved()

    def test_a_chain_ends_one_hop_from_the_survivor_and_repeating_a_link_is_a_no_op(self):
        last = MemoryUserFactory(workspace=self.workspace)
        assert self.post(self.source.pk, {"target": str(self.target.pk)}).status_code == 200
        assert self.post(self.target.pk, {"target": str(last.pk)}).status_code == 200

        again = self.post(self.source.pk, {"target": str(last.pk)})

        assert again.status_code == 200 and again.json()["already_merged"] is True
        assert set(MemoryUser.objects.filter(merged_into=last).values_list("pk", flat=True)) == {
            self.source.pk,
            self.target.pk,
        }
        assert ChannelIdentity.objects.get(external_id="ann@example.com").memory_user_id == last.pk

    def test_the_response_shows_the_hold_carried_from_the_source(self):
        memory_user_hold_place(memory_user=self.source, reason="Case 7", actor="operator:owner")

        response = self.post(self.source.pk, {"target": str(self.target.pk)})

        assert response.status_code == 200
        assert response.json()["target"]["legal_hold"]["reason"] == "Case 7"
