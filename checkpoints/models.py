from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models

from core.models import TimeStampedModel, Workspace


class CheckpointQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)


class Checkpoint(TimeStampedModel):
    """Suspended agent state, shaped like LangGraph's checkpoint tuples.

    `checkpoint_id` is the client's id; LangGraph's ids (UUID v6) sort by time, so the
    newest checkpoint is the greatest id, as in LangGraph's own Postgres saver.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey("threads.Thread", on_delete=models.CASCADE, related_name="checkpoints")
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=255)
    parent_checkpoint_id = models.CharField(max_length=255, null=True, blank=True)
    # The serializer's name (LangGraph: "msgpack", "json", ...) and the serialized bytes.
    type = models.CharField(max_length=50)
    data = models.BinaryField()
    metadata = models.JSONField(default=dict, blank=True)

    objects = CheckpointQuerySet.as_manager()

    class Meta:
        ordering = ["-checkpoint_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id"], name="checkpoints_thread_ns_id"
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "-created_at"], name="checkpoints_recent"),
            models.Index(fields=["created_at"], name="checkpoints_created"),
            # `metadata @>` (the lists' metadata filter; LangGraph's `list(filter=...)` across
            # threads): the checkpoints holding the pairs, instead of testing each one.
            GinIndex(
                OpClass("metadata", name="jsonb_path_ops"), name="checkpoints_metadata", fastupdate=False
            ),
        ]

    def __str__(self):
        return f"{self.checkpoint_ns or '-'}:{self.checkpoint_id}"


class CheckpointWrite(models.Model):
    """A pending write of a task against a checkpoint (LangGraph's `put_writes`)."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="writes")
    task_id = models.CharField(max_length=255)
    task_path = models.CharField(max_length=1000, blank=True, default="")
    idx = models.IntegerField()
    channel = models.CharField(max_length=255)
    type = models.CharField(max_length=50)
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task_path", "task_id", "idx"]
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint", "task_id", "idx"], name="checkpoints_write_task_idx"
            ),
        ]

    def __str__(self):
        return f"{self.task_id}[{self.idx}] -> {self.channel}"
