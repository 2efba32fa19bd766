"""Merge chains deeper than one hop (older data: Ann merged into Bo, later Bo into Cy, before
merges re-pointed the records merged into their source). Every read that sends a merged record
to its survivor follows the chain to its end, Cy, in one bounded, cycle-safe query."""

from core.errors import ConflictError, NotFoundError
from core.testing import MemoryTestCase
from identities import services
from identities.models import MemoryUser
from identities.selectors import (
    MERGE_CHAIN_LIMIT,
    memory_user_legal_holds,
    memory_user_merge_chain,
    memory_user_merged_ids,
    memory_user_resolve_merged,
    memory_user_survivor_ids,
)
from identities.services import memory_user_erase, memory_user_hold_place, memory_user_hold_release
from identities.tests.factories import MemoryUserFactory

LIST = "/api/v1/memory-users/"


def chain_of(workspace, *names):
    """People merged one into the next as an earlier release left them (only `merged_into`)."""
    people = [MemoryUserFactory(workspace=workspace, display_name=name) for name in names]
    for person, into in zip(people[:-1], people[1:], strict=True):
        MemoryUser.objects.filter(pk=person.pk).update(merged_into=into)
        person.merged_into_id = into.pk
    return people


class MergeChainSelectorTests(MemoryTestCase):
    def setUp(self):
        self.ann, self.bo, self.cy = chain_of(self.workspace, "Ann", "Bo", "Cy")

    def test_the_survivor_is_the_end_of_the_chain_in_one_query(self):
        """Before: memory_user_resolve_merged read one row per hop."""
        with self.assertNumQueries(1):
            survivors = memory_user_survivor_ids(ids=[self.ann.pk, self.bo.pk, str(self.cy.pk), "nope"])
        assert survivors == {self.ann.pk: self.cy.pk, self.bo.pk: self.cy.pk, self.cy.pk: self.cy.pk}
        with self.assertNumQueries(1):
            assert memory_user_resolve_merged(memory_user=self.ann) == self.cy
        with self.assertNumQueries(0):
            assert memory_user_resolve_merged(memory_user=self.cy) is self.cy
        assert memory_user_merge_chain(memory_user=self.ann) == [self.ann.pk, self.bo.pk, self.cy.pk]
        assert memory_user_merged_ids(memory_user=self.cy) == [self.cy.pk, self.bo.pk, self.ann.pk]

    def test_a_cycle_or_an_overlong_chain_ends_without_looping(self):
        MemoryUser.objects.filter(pk=self.cy.pk).update(merged_into=self.ann)
        with self.assertNumQueries(1):
            survivors = memory_user_survivor_ids(ids=[self.ann.pk])
        assert survivors == {self.ann.pk: self.cy.pk}
        everyone = sorted([self.ann.pk, self.bo.pk, self.cy.pk])
        assert sorted(memory_user_merged_ids(memory_user=self.ann)) == everyone

        long = chain_of(self.workspace, *(f"P{i}" for i in range(MERGE_CHAIN_LIMIT + 5)))
        assert memory_user_survivor_ids(ids=[long[0].pk]) == {long[0].pk: long[MERGE_CHAIN_LIMIT].pk}


class MergeChainHoldTests(MemoryTestCase):
    def setUp(self):
        self.ann, self.bo, self.cy = chain_of(self.workspace, "Ann", "Bo", "Cy")
        memory_user_hold_place(memory_user=self.ann, reason="Case 7", actor="operator:owner")

    def test_the_survivor_lists_and_releases_a_hold_placed_two_merges_back(self):
        """Before: Cy's holds listed only records merged into Cy directly, and releasing Ann's
        hold on Cy was a 404, so a hold that blocks Cy's erasure could not be released there."""
        assert [hold.pk for hold in memory_user_legal_holds(memory_user=self.cy)] == [self.ann.pk]
        listed = self.api().get(f"{LIST}{self.cy.pk}/legal-hold/").json()["legal_holds"]
        assert [hold["placed_on"] for hold in listed] == [str(self.ann.pk)]

        response = self.api().delete(f"{LIST}{self.cy.pk}/legal-hold/?placed_on={self.ann.pk}")

        assert response.status_code == 200, response.content
        assert not MemoryUser.objects.filter(legal_hold_at__isnull=False).exists()

    def test_a_hold_off_the_chain_is_still_not_found(self):
        other = MemoryUserFactory(workspace=self.workspace)
        memory_user_hold_place(memory_user=other, reason="Case 8", actor="operator:owner")
        with self.assertRaises(NotFoundError):
            memory_user_hold_release(memory_user=self.cy, placed_on=other, actor="operator:owner")
        # Down the chain only: Ann's page does not reach Cy's own hold.
        memory_user_hold_place(memory_user=self.cy, reason="Case 9", actor="operator:owner")
        with self.assertRaises(NotFoundError):
            memory_user_hold_release(memory_user=self.ann, placed_on=self.cy, actor="operator:owner")
        assert MemoryUser.objects.filter(legal_hold_at__isnull=False).count() == 3


class MergeChainErasureTests(MemoryTestCase):
    def setUp(self):
        self.ann, self.bo, self.cy = chain_of(self.workspace, "Ann", "Bo", "Cy")

    def test_the_merged_refusal_names_the_final_survivor(self):
        """Before: `fields.merged_into` named Bo, itself a merged record whose erasure is
        refused in turn."""
        with self.assertRaisesMessage(ConflictError, services.MERGED_RECORD_ERASE) as refused:
            memory_user_erase(memory_user=self.ann, actor="operator:owner")
        assert refused.exception.fields == {"ids": [str(self.ann.pk)], "merged_into": [str(self.cy.pk)]}

        response = self.api().delete(f"{LIST}{self.ann.pk}/")

        assert response.status_code == 409, response.content
        assert response.json()["error"]["fields"]["merged_into"] == [str(self.cy.pk)]
        assert MemoryUser.objects.filter(pk__in=[self.ann.pk, self.bo.pk, self.cy.pk]).count() == 3

    def test_a_batch_naming_the_final_survivor_erases_the_whole_chain(self):
        """Before: naming Ann with Cy was refused, since Ann's own `merged_into` (Bo) was not
        named, though erasing Cy erases Ann."""
        response = self.api().post(
            f"{LIST}batch-delete/", {"ids": [str(self.ann.pk), str(self.cy.pk)]}, format="json"
        )

        assert response.status_code == 200, response.content
        assert response.json()["memory_users"] == 3
        assert not MemoryUser.objects.filter(pk__in=[self.ann.pk, self.bo.pk, self.cy.pk]).exists()
