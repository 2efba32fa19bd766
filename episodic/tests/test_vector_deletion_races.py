"""The entry vector job (episodic.services.entry_embed_batch) and deletions of entries on two
connections: neither waits for the other in a cycle (PostgreSQL aborted one as a deadlock), and
a deletion never fails at commit on a vector the job wrote meanwhile.

A vector's foreign key to its entry is checked at commit. A deletion that deleted the entry's
vectors and only then waited for the entry (held by the job while it wrote a new vector)
deleted the entry after the job committed: the new vector failed the deletion at commit. And a
job that held some entries and waited for another that a deletion holds closed a cycle when the
deletion then unlinked an entry the job held (`superseded_by`, set to NULL by the collector).
"""

import dataclasses
from datetime import timedelta
from unittest import mock

from django.db import connection, transaction
from django.db.models.query import QuerySet
from django.test import TransactionTestCase
from django.utils import timezone

from core.access import Principal
from core.models import Membership
from core.services import agent_register, workspace_create
from core.testing_embeddings import TEST_MODEL, RacingEmbeddingProvider
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entry_delete, entry_embed_batch
from episodic.tests.factories import entry_factory, memory_user_factory
from retention import targets
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_rules_effective
from retention.services import _apply_rule
from retention.tests.test_engine_append_race import Elsewhere


class VectorDeletionTestCase(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Vectors and deletions")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_factory(self.workspace)

    def entry(self, content, **kwargs):
        return entry_factory(
            agent=self.agent, memory_user=self.person, content=content, embed=False, **kwargs
        )

    def embedded(self) -> set:
        return set(EntryEmbedding.objects.values_list("entry_id", flat=True))

    def merged_pair(self, *, expired=False):
        """(`into`, `merged`): a recent entry merged into `into` in review (its
        `superseded_by`). A vector job locks in key order: `into` first, or, `expired` (40
        days old, for retention), `merged` first."""
        while True:
            created = timezone.now() - timedelta(days=40 if expired else 0)
            into = self.entry("Ada moved to Lisbon.", created_at=created)
            merged = self.entry(
                "Ada lives in Lisbon now.",
                superseded_by=into,
                status=EpisodicEntry.Status.SUPERSEDED,
                review=EpisodicEntry.Review.MERGED,
            )
            if (merged.pk < into.pk) == expired:
                return into, merged
            EpisodicEntry.objects.all().delete()

    def while_vectors_are_written(self, work):
        """Patch bulk_create so that `work` starts on its own connection once the job holds
        its entries, right before it inserts their vectors; returns (fired, patch)."""
        bulk_create, fired = QuerySet.bulk_create, []

        def vectors_written(queryset, objs, *args, **kwargs):
            if queryset.model is EntryEmbedding and not fired:
                fired.append(True)
                work.start()
            return bulk_create(queryset, objs, *args, **kwargs)

        return fired, mock.patch.object(QuerySet, "bulk_create", vectors_written)


class DeletionDuringVectorsTests(VectorDeletionTestCase):
    def principal(self):
        return Principal(workspace=self.workspace, role=Membership.Role.ADMIN)

    def test_an_entry_delete_during_a_vector_job_never_deadlocks(self):
        """A delete unlinks the entry merged into the one it deletes before it deletes that
        one; a vector job of both meets them the other way round (key order). A third
        transaction holding the deleted entry (KEY SHARE, as a foreign key check takes it)
        stops the delete between the two, where the job starts. Neither waits for the other
        in a cycle: the deleted entry goes with its vector; the merged one, which the delete
        held while it unlinked it, was skipped by the job and is left to the sweep."""
        gone, merged = self.merged_pair()
        deletion = Elsewhere(lambda: entry_delete(entry=gone, actor="test"))
        embedding = Elsewhere(
            lambda: entry_embed_batch(entry_ids=[gone.pk, merged.pk], provider=RacingEmbeddingProvider())
        )
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT id FROM episodes_episodicentry WHERE id = %s FOR KEY SHARE", [gone.pk]
                    )
                deletion.start()
                embedding.start()
        finally:
            deleted, embedded = deletion.finish(), embedding.finish()
        assert "error" not in deleted, deleted
        assert "error" not in embedded, embedded
        assert list(EpisodicEntry.objects.values_list("pk", flat=True)) == [merged.pk]
        assert EpisodicEntry.objects.get(pk=merged.pk).superseded_by_id is None
        assert self.embedded() <= {merged.pk}
        connection.check_constraints()

    def test_an_entry_deleted_while_its_vector_is_written_goes_with_the_vector(self):
        """A delete meeting the vector job while it writes the entry's vector waits for it and
        deletes the new vector too (the vector's foreign key cascades in the database)."""
        gone, kept = self.entry("Ada adopted a cat."), self.entry("Ada moved to Lisbon.")
        deletion = Elsewhere(lambda: entry_delete(entry=gone, actor="test"))
        fired, patched = self.while_vectors_are_written(deletion)
        try:
            with patched:
                written = entry_embed_batch(entry_ids=[gone.pk, kept.pk], provider=RacingEmbeddingProvider())
        finally:
            outcome = deletion.finish()
        assert fired == [True]
        assert "error" not in outcome, outcome
        assert written == 2
        assert list(EpisodicEntry.objects.values_list("pk", flat=True)) == [kept.pk]
        assert self.embedded() == {kept.pk}
        assert EpisodicEntry.objects.get(pk=kept.pk).embedding_model == TEST_MODEL
        connection.check_constraints()


class RetentionDuringVectorsTests(VectorDeletionTestCase):
    def setUp(self):
        super().setUp()
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.EPISODIC_ENTRIES, max_age_days=30)
        self.run = RetentionRun.objects.create(workspace=self.workspace, trigger="test")

    def retain(self) -> int:
        """One pass of the episodic entries rule, as a run applies it."""
        (rule,) = [
            r for r in retention_rules_effective(workspace=self.workspace) if r.tier == Tier.EPISODIC_ENTRIES
        ]
        return _apply_rule(rule=rule, run=self.run, now=timezone.now())

    def _after_locks(self, during):
        """Patch the entries target so that `during` runs once the batch holds the entries it
        deletes, before it deletes them."""
        target = targets.TARGETS[Tier.EPISODIC_ENTRIES]
        fired = []

        def before_delete(ids):
            if not fired:
                fired.append(True)
                during()
            return ids

        patched = dataclasses.replace(target, before_delete=before_delete)
        return fired, mock.patch.dict(targets.TARGETS, {Tier.EPISODIC_ENTRIES: patched})

    def test_a_vector_job_during_a_retention_batch_never_deadlocks(self):
        """Retention holds an expired entry; a recent entry merged into it in review (its
        `superseded_by`) has a smaller key, so a vector job of both holds the recent one first.
        The job skips the expired entry instead of waiting for it, and retention, which then
        unlinks the recent entry, waits for the job, not the other way round."""
        expired, merged = self.merged_pair(expired=True)
        embedding = Elsewhere(
            lambda: entry_embed_batch(entry_ids=[expired.pk, merged.pk], provider=RacingEmbeddingProvider())
        )
        fired, patched = self._after_locks(embedding.start)
        try:
            with patched:
                deleted = self.retain()
        finally:
            outcome = embedding.finish()
        assert fired == [True]
        assert "error" not in outcome, outcome
        assert outcome["value"] == 1
        assert deleted == 1
        assert list(EpisodicEntry.objects.values_list("pk", flat=True)) == [merged.pk]
        assert EpisodicEntry.objects.get(pk=merged.pk).superseded_by_id is None
        assert self.embedded() == {merged.pk}
        connection.check_constraints()

    def test_a_retention_batch_skips_an_entry_a_vector_job_holds(self):
        """Retention starting while the job writes a vector of an expired entry leaves that
        entry for a later batch; the next pass deletes it with its vector."""
        expired = self.entry("Ada moved to Lisbon.", created_at=timezone.now() - timedelta(days=40))
        retention = Elsewhere(self.retain)
        fired, patched = self.while_vectors_are_written(retention)
        try:
            with patched:
                written = entry_embed_batch(entry_ids=[expired.pk], provider=RacingEmbeddingProvider())
        finally:
            outcome = retention.finish()
        assert fired == [True]
        assert "error" not in outcome, outcome
        assert written == 1
        assert outcome["value"] == 0
        assert self.embedded() == {expired.pk}
        assert self.retain() == 1
        assert not EpisodicEntry.objects.exists()
        assert not EntryEmbedding.objects.exists()
        connection.check_constraints()
