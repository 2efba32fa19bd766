from datetime import timedelta

from django.utils import timezone

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoints_prune
from checkpoints.tests.factories import make_checkpoint
from core.testing import MemoryTestCase
from identities.services import memory_user_hold_place, memory_user_hold_release, memory_user_merge
from identities.tests.factories import MemoryUserFactory
from threads.tests.factories import make_thread


class PruneTests(MemoryTestCase):
    def test_keeps_the_newest_n_per_thread_and_namespace(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        small = make_thread(workspace=self.workspace, agent=self.agent)
        for i in range(6):
            make_checkpoint(thread, f"c{i}")
        make_checkpoint(thread, "s0", ns="sub")
        make_checkpoint(small, "only")

        assert checkpoints_prune(keep_last=3, ttl_days=0) == 3

        assert sorted(
            Checkpoint.objects.filter(thread=thread, checkpoint_ns="").values_list("checkpoint_id", flat=True)
        ) == ["c3", "c4", "c5"]
        assert Checkpoint.objects.filter(checkpoint_ns="sub").count() == 1
        assert Checkpoint.objects.filter(thread=small).count() == 1

    def test_time_to_live(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        old = make_checkpoint(thread, "old")
        make_checkpoint(thread, "new")
        Checkpoint.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
        assert checkpoints_prune(keep_last=0, ttl_days=7) == 1
        assert list(Checkpoint.objects.values_list("checkpoint_id", flat=True)) == ["new"]

    def test_deleting_a_thread_deletes_its_checkpoints(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        make_checkpoint(thread, "c")
        response = self.api().delete(f"/api/v1/threads/{thread.pk}/")
        assert response.status_code == 204
        assert not Checkpoint.objects.exists()

    def test_a_held_persons_checkpoints_are_not_pruned(self):
        """docs/retention.md: nothing of a held person is touched, checkpoints included; the
        deployment-wide pruning had deleted them like any others."""
        held = MemoryUserFactory(workspace=self.workspace, canonical_id="t:held")
        merged_into = MemoryUserFactory(workspace=self.workspace, canonical_id="t:survivor")
        merged = MemoryUserFactory(workspace=self.workspace, canonical_id="t:merged")
        memory_user_hold_place(memory_user=held, reason="Case 7", actor="operator:owner")
        memory_user_hold_place(memory_user=merged, reason="Case 8", actor="operator:owner")
        memory_user_merge(source=merged, target=merged_into, actor="operator:owner")
        merged_into.refresh_from_db()
        memory_user_hold_release(memory_user=merged_into, actor="operator:owner")
        threads = [
            make_thread(workspace=self.workspace, agent=self.agent, memory_user=person)
            for person in (held, merged_into, None)
        ]
        for thread in threads:
            for i in range(4):
                checkpoint = make_checkpoint(thread, f"c{i}")
                if i == 0:
                    Checkpoint.objects.filter(pk=checkpoint.pk).update(
                        created_at=timezone.now() - timedelta(days=10)
                    )

        assert checkpoints_prune(keep_last=2, ttl_days=7) == 2

        assert Checkpoint.objects.filter(thread__in=threads[:2]).count() == 8
        assert list(
            Checkpoint.objects.filter(thread=threads[2])
            .order_by("checkpoint_id")
            .values_list("checkpoint_id", flat=True)
        ) == ["c2", "c3"]
