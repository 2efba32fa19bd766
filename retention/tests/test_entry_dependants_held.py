"""Retention's batch of entries never waits for an entry another transaction holds: an
expired entry whose dependant (an entry merged into it, which the delete unlinks) is held
elsewhere stays for a later batch, and goes once the holder commits. A batch that waited for
the dependant deadlocked with a purge by source holding it (provenance tests)."""

from datetime import timedelta

from django.db import connection, transaction
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import agent_register, workspace_create
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_rules_effective
from retention.services import _apply_rule
from retention.tests.test_engine_append_race import Elsewhere


class EntryDependantTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Dependants")
        agent = agent_register(workspace=self.workspace, slug="support")
        person = memory_user_factory(self.workspace)
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.EPISODIC_ENTRIES, max_age_days=30)
        self.run = RetentionRun.objects.create(workspace=self.workspace)
        self.expired = entry_factory(
            agent=agent,
            memory_user=person,
            content="Ada moved to Lisbon.",
            embed=False,
            created_at=timezone.now() - timedelta(days=40),
        )
        self.merged = entry_factory(
            agent=agent,
            memory_user=person,
            content="Ada lives in Lisbon now.",
            embed=False,
            superseded_by=self.expired,
            status=EpisodicEntry.Status.SUPERSEDED,
            review=EpisodicEntry.Review.MERGED,
        )

    def retain(self):
        (rule,) = [
            r for r in retention_rules_effective(workspace=self.workspace) if r.tier == Tier.EPISODIC_ENTRIES
        ]
        return _apply_rule(rule=rule, now=timezone.now(), run=self.run)

    def test_an_entry_whose_dependant_is_held_elsewhere_waits_for_a_later_batch(self):
        batch = Elsewhere(self.retain)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT id FROM episodes_episodicentry WHERE id = %s FOR NO KEY UPDATE", [self.merged.pk]
                )
            batch.start()
            outcome = batch.finish()
        assert "error" not in outcome, outcome
        assert EpisodicEntry.objects.filter(pk=self.expired.pk).exists()

        self.retain()
        assert not EpisodicEntry.objects.filter(pk=self.expired.pk).exists()
        assert EpisodicEntry.objects.get(pk=self.merged.pk).superseded_by_id is None
