"""A legal hold on a person merged into another keeps their rows held."""

from datetime import timedelta

from django.utils import timezone

from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from identities.services import memory_user_hold_place, memory_user_hold_release, memory_user_merge
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, Tier
from retention.services import retention_run

OLD = timezone.now() - timedelta(days=40)


class MergeKeepsTheLegalHoldTests(MemoryTestCase):
    def setUp(self):
        self.source = MemoryUserFactory(workspace=self.workspace)
        self.target = MemoryUserFactory(workspace=self.workspace)

    def old_entry(self, person, content):
        entry = entry_factory(agent=self.agent, memory_user=person, content=content, embed=False)
        EpisodicEntry.objects.filter(pk=entry.pk).update(created_at=OLD)
        return entry

    def test_rows_of_a_held_source_stay_out_of_retention_after_the_merge(self):
        """Before: the hold stayed on the emptied source row while its rows moved to an
        unheld target, so the next retention run deleted what the court order preserves."""
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.EPISODIC_ENTRIES, max_age_days=30)
        held = self.old_entry(self.source, "Signed the contract on the 3rd.")
        memory_user_hold_place(memory_user=self.source, reason="Case 2026-114", actor="operator:owner")

        memory_user_merge(source=self.source, target=self.target, actor="operator:owner")
        retention_run(workspace=self.workspace, trigger="test")

        assert EpisodicEntry.objects.filter(pk=held.pk).exists()
        self.target.refresh_from_db()
        assert self.target.legal_hold_at is not None
        assert self.target.legal_hold_reason == "Case 2026-114"
        assert self.target.legal_hold_by == "operator:owner"
        merge = AuditEvent.objects.get(action="merge", entity_id=str(self.source.pk))
        assert merge.changes["legal_hold"] == "Case 2026-114"

    def test_a_held_target_keeps_its_own_hold(self):
        memory_user_hold_place(memory_user=self.target, reason="Case 1", actor="operator:owner")
        memory_user_hold_place(memory_user=self.source, reason="Case 2", actor="operator:teammate")

        result = memory_user_merge(source=self.source, target=self.target, actor="operator:owner")

        assert result.target.legal_hold_reason == "Case 1"
        self.target.refresh_from_db()
        assert (self.target.legal_hold_reason, self.target.legal_hold_by) == ("Case 1", "operator:owner")

    def test_merging_unheld_people_places_no_hold(self):
        memory_user_merge(source=self.source, target=self.target, actor="operator:owner")
        self.target.refresh_from_db()
        assert self.target.legal_hold_at is None
        assert "legal_hold" not in AuditEvent.objects.get(action="merge").changes

    def test_rows_of_a_held_source_stay_held_after_the_targets_own_hold_is_released(self):
        """Both held: the target keeps its own hold, the source keeps its. Releasing the
        target's must not expose the rows the source's hold still covers."""
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.EPISODIC_ENTRIES, max_age_days=30)
        held = self.old_entry(self.source, "Signed the contract on the 3rd.")
        unheld = self.old_entry(self.target, "Asked about the weather.")
        memory_user_hold_place(memory_user=self.target, reason="Case 1", actor="operator:owner")
        memory_user_hold_place(memory_user=self.source, reason="Case 2", actor="operator:owner")
        memory_user_merge(source=self.source, target=self.target, actor="operator:owner")
        self.target.refresh_from_db()

        memory_user_hold_release(memory_user=self.target, actor="operator:owner")
        retention_run(workspace=self.workspace, trigger="test")

        assert EpisodicEntry.objects.filter(pk=held.pk).exists()
        # The person is still under the source's hold, as erasure says (it is refused): every
        # row of theirs stays.
        assert EpisodicEntry.objects.filter(pk=unheld.pk).exists()

        # Released on the merged person, the hold covers nothing any more.
        self.source.refresh_from_db()
        memory_user_hold_release(memory_user=self.source, actor="operator:owner")
        retention_run(workspace=self.workspace, trigger="test")
        assert not EpisodicEntry.objects.filter(pk__in=[held.pk, unheld.pk]).exists()
