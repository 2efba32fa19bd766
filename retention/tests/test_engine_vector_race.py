"""The vector job (threads.services.embeddings.message_embed_batch) and retention's deletion
batches on two connections: neither waits for the other in a cycle (PostgreSQL aborted one as
a deadlock), and no message that no summary holds is lost.

Messages have random (uuid4) keys, so a vector batch that locks messages in key order takes a
kept child before a deleted message of a larger key; retention's batch holds the deleted
messages and then unlinks their children. Threads: the vector batch held its messages and
checked its thread at commit, while retention's thread batch held the thread and waited to
delete those messages.
"""

import dataclasses
from datetime import timedelta
from unittest import mock

from django.db import connection, transaction
from django.db.models.query import QuerySet
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import agent_register, workspace_create
from core.testing_embeddings import RacingEmbeddingProvider
from identities.services import memory_user_create
from retention import targets
from retention.models import RetentionRule, RetentionRun, Tier
from retention.selectors import retention_rules_effective
from retention.services import _apply_rule
from retention.tests.test_engine_append_race import Elsewhere
from threads.models import Message, MessageEmbedding, SummarizedMessage, Thread
from threads.services.compaction import _summary_held_mark
from threads.services.embeddings import message_embed_batch
from threads.tests.factories import append, make_thread


class EmbedLocksTestCase(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Vectors and retention")
        self.agent = agent_register(workspace=self.workspace, slug="support")
        self.person = memory_user_create(
            workspace=self.workspace, canonical_id="telegram:1", display_name="Ada"
        )
        self.run = RetentionRun.objects.create(workspace=self.workspace, trigger="test")

    def summarized_thread(self):
        """A thread of eight turns, 40 days old, whose summary holds the first five alone;
        the sixth (`child`) is kept, a child of the fifth. Rebuilt until a held message has a
        larger key than the child, the order in which the vector batch meets them."""
        while True:
            thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
            messages = append(
                thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(8)]
            )
            held, child = messages[:5], messages[5]
            if max(m.pk for m in held) > child.pk:
                break
            Thread.objects.filter(pk=thread.pk).delete()
        Thread.objects.filter(pk=thread.pk).update(
            summary="- earlier turns", summary_upto_id=child.pk, summary_upto_depth=child.depth
        )
        with transaction.atomic():
            _summary_held_mark(thread_id=thread.pk, scope="", upto_id=child.pk, extends=False)
        assert set(
            SummarizedMessage.objects.filter(message__thread=thread).values_list("message_id", flat=True)
        ) == {m.pk for m in held}
        assert child.parent_id == held[-1].pk
        Message.objects.filter(thread=thread).update(created_at=timezone.now() - timedelta(days=40))
        Thread.objects.filter(pk=thread.pk).update(last_activity_at=timezone.now() - timedelta(days=40))
        return thread, messages

    def retain(self, tier) -> int:
        """One pass of the rule of `tier`, as a run applies it."""
        (rule,) = [r for r in retention_rules_effective(workspace=self.workspace) if r.tier == tier]
        return _apply_rule(rule=rule, run=self.run, now=timezone.now())

    def embedded(self) -> set:
        return set(MessageEmbedding.objects.values_list("message_id", flat=True))


class MessageBatchAndVectorsTests(EmbedLocksTestCase):
    def setUp(self):
        super().setUp()
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.MESSAGES, max_age_days=30)
        self.thread, self.messages = self.summarized_thread()
        self.held = {m.pk for m in self.messages[:5]}
        self.child = self.messages[5]

    def _after_locks(self, during):
        """Patch the messages target so that `during` runs once the batch holds the messages
        it deletes, before it detaches their children."""
        target = targets.TARGETS[Tier.MESSAGES]
        detach, fired = target.before_delete, []

        def before_delete(ids):
            if not fired:
                fired.append(True)
                during()
            return detach(ids)

        patched = dataclasses.replace(target, before_delete=before_delete)
        return fired, mock.patch.dict(targets.TARGETS, {Tier.MESSAGES: patched})

    def test_a_vector_batch_during_a_deletion_batch_never_deadlocks(self):
        """The deletion batch holds the summarized messages; a vector batch of the kept
        messages and of the held ones keyed above the child starts then (the child is locked
        first). It skips what is being deleted, embeds the rest without waiting, and the
        deletion batch then detaches the child and deletes the held messages."""
        ids = [m.pk for m in self.messages if m.pk not in self.held or m.pk > self.child.pk]
        embedding = Elsewhere(
            lambda: message_embed_batch(message_ids=ids, provider=RacingEmbeddingProvider())
        )
        fired, patched = self._after_locks(embedding.start)
        try:
            with patched:
                deleted = self.retain(Tier.MESSAGES)
        finally:
            outcome = embedding.finish()
        assert fired == [True]
        assert "error" not in outcome, outcome
        kept = {m.pk for m in self.messages} - self.held
        assert outcome["value"] == len(kept)
        assert deleted == len(self.held)
        assert set(Message.objects.values_list("pk", flat=True)) == kept
        assert self.embedded() == kept
        assert Message.objects.get(pk=self.child.pk).parent_id is None
        connection.check_constraints()

    def test_a_deletion_batch_never_waits_for_a_child_a_vector_batch_holds(self):
        """The vector batch holds the child while it writes its vectors; a deletion batch then
        deletes every held message but the child's parent, which waits for a later batch, and
        never waits for the vector batch."""
        retention = Elsewhere(lambda: self.retain(Tier.MESSAGES))
        bulk_create, fired = QuerySet.bulk_create, []

        def vectors_written(queryset, objs, *args, **kwargs):
            if queryset.model is MessageEmbedding and not fired:
                fired.append(True)
                retention.start()
                # Not a timing assertion: the batch must finish while the vectors wait.
                retention.worker.join(60)
                assert not retention.worker.is_alive()
            return bulk_create(queryset, objs, *args, **kwargs)

        with mock.patch.object(QuerySet, "bulk_create", vectors_written):
            written = message_embed_batch(message_ids=[self.child.pk], provider=RacingEmbeddingProvider())
        outcome = retention.finish()
        assert fired == [True]
        assert "error" not in outcome, outcome
        assert written == 1
        parent = self.messages[4]
        assert outcome["value"] == len(self.held) - 1
        assert set(Message.objects.values_list("pk", flat=True)) == {m.pk for m in self.messages[4:]}
        assert Message.objects.get(pk=parent.pk).parent_id is None
        assert Message.objects.get(pk=self.child.pk).parent_id == parent.pk
        # The next batch, the child free, deletes the parent and detaches the child.
        assert self.retain(Tier.MESSAGES) == 1
        assert Message.objects.get(pk=self.child.pk).parent_id is None
        assert self.embedded() == {self.child.pk}
        connection.check_constraints()


class ThreadBatchAndVectorsTests(EmbedLocksTestCase):
    def setUp(self):
        super().setUp()
        RetentionRule.objects.create(workspace=self.workspace, tier=Tier.THREADS, max_age_days=30)
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.messages = append(self.thread, ("user", "Tea, please."), ("assistant", "Green or black?"))
        Thread.objects.filter(pk=self.thread.pk).update(last_activity_at=timezone.now() - timedelta(days=40))

    def test_a_thread_batch_during_a_vector_batch_never_deadlocks(self):
        """The vector batch holds its messages and writes their vectors; retention's thread
        batch starts then, and skips the thread (the vector batch holds it) instead of waiting
        to delete its messages while the vector batch waits for the thread at commit. The next
        run deletes the thread and its vectors."""
        retention = Elsewhere(lambda: self.retain(Tier.THREADS))
        bulk_create, fired = QuerySet.bulk_create, []

        def vectors_written(queryset, objs, *args, **kwargs):
            if queryset.model is MessageEmbedding and not fired:
                fired.append(True)
                retention.start()
            return bulk_create(queryset, objs, *args, **kwargs)

        try:
            with mock.patch.object(QuerySet, "bulk_create", vectors_written):
                written = message_embed_batch(
                    message_ids=[m.pk for m in self.messages], provider=RacingEmbeddingProvider()
                )
        finally:
            outcome = retention.finish()
        assert fired == [True]
        assert "error" not in outcome, outcome
        assert written == len(self.messages)
        assert outcome["value"] == 0
        assert self.embedded() == {m.pk for m in self.messages}
        assert self.retain(Tier.THREADS) == 1
        assert not Thread.objects.exists()
        assert not MessageEmbedding.objects.exists()
        connection.check_constraints()
