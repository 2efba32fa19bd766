import pytest

from checkpoints.models import Checkpoint
from checkpoints.services import METADATA_NOT_OBJECT, checkpoint_metadata_update
from checkpoints.tests.factories import make_checkpoint
from core.errors import ApplicationError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from threads.tests.factories import make_thread


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


class CheckpointMetadataUpdateTests(MemoryTestCase):
    def setUp(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.checkpoint = make_checkpoint(thread, "c1")
        self.data = bytes(Checkpoint.objects.get(pk=self.checkpoint.pk).data)

    def test_replaces_the_metadata_audited_and_keeps_the_state(self):
        checkpoint = checkpoint_metadata_update(
            checkpoint=self.checkpoint, metadata={"source": "update", "step": 4}, actor="operator:ada"
        )
        stored = Checkpoint.objects.get(pk=checkpoint.pk)
        assert stored.metadata == {"source": "update", "step": 4}
        assert bytes(stored.data) == self.data
        event = AuditEvent.objects.get(entity_type="checkpoint", entity_id=str(checkpoint.pk))
        assert (event.action, event.actor) == ("update", "operator:ada")
        assert event.changes["keys_after"] == ["source", "step"]

    def test_same_metadata_writes_nothing(self):
        checkpoint_metadata_update(checkpoint=self.checkpoint, metadata=self.checkpoint.metadata, actor="t")
        assert not AuditEvent.objects.filter(entity_type="checkpoint").exists()

    def test_refuses_what_postgres_or_the_api_would_refuse(self):
        cases = {
            "list": ([1], METADATA_NOT_OBJECT),
            "NUL": ({"a": "x\x00"}, "NUL"),
            "surrogate": ({"a": "\ud800"}, "surrogate"),
            "depth": ({"a": _nested(100)}, "nested deeper than"),
        }
        for name, (metadata, message) in cases.items():
            with self.subTest(name):
                with pytest.raises(ApplicationError) as caught:
                    checkpoint_metadata_update(checkpoint=self.checkpoint, metadata=metadata, actor="t")
                assert message in caught.value.fields["metadata"][0]
        assert Checkpoint.objects.get(pk=self.checkpoint.pk).metadata == self.checkpoint.metadata
