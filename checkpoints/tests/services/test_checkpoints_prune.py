from datetime import timedelta

from django.utils import timezone

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoints_prune
from checkpoints.tests.factories import make_checkpoint
from core.testing import MemoryTestCase
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
