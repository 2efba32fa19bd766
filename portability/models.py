"""Import jobs and the id map that makes a second import of the same export a no-op."""

import uuid

from django.db import models
from django.utils import timezone

from core.models import Workspace


class ImportJob(models.Model):
    """One run of an import: its progress while it runs and its report once it ends."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    actor = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    dry_run = models.BooleanField(default=False)
    file_name = models.CharField(max_length=255, blank=True)
    # The uploaded file while the job waits for a worker (PORTABILITY_IMPORT_DIR); "" once read.
    file_path = models.CharField(max_length=1000, blank=True)
    # Progress in bytes of the file: lines are of any length, so bytes are what a bar can show.
    bytes_total = models.BigIntegerField(default=0)
    bytes_done = models.BigIntegerField(default=0)
    lines_done = models.BigIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)
    # {"code", "message", "line"} of the line that stopped the run; nothing was stored.
    error = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written every PORTABILITY_IMPORT_HEARTBEAT_SECONDS while a worker runs the job; a stale
    # one tells the sweep the worker died (services/jobs.py import_jobs_sweep).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Runs started: the sweep queues a job whose worker died again while this is below
    # PORTABILITY_IMPORT_MAX_ATTEMPTS.
    attempts = models.PositiveSmallIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="portability_job_recent")]

    def __str__(self):
        return f"Import {self.pk} ({self.status})"


class ImportIdMap(models.Model):
    """Which row of this workspace an exported row became, per export source.

    Kept in the database so the map of a 1 GB file never sits in memory, and kept after the
    run so a second import of the same source finds every row it already made. A row may be
    named before it arrives (a thread's summary names a message that comes later): its id is
    then reserved here and taken when the row arrives.
    """

    class State(models.TextChoices):
        RESERVED = "reserved", "Reserved (named, not yet arrived)"
        CREATED = "created", "Created by an import"
        REUSED = "reused", "Matched to a row that was already there"

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # The header's `source`: the exporting workspace's id.
    source = models.CharField(max_length=100)
    type = models.CharField(max_length=40)
    old_id = models.CharField(max_length=64)
    new_id = models.CharField(max_length=64)
    state = models.CharField(max_length=10, choices=State.choices)
    # A foreign key names it: it must arrive before the run ends. Plain id columns and id
    # lists may name rows the export does not hold (deleted since), as in the source.
    required = models.BooleanField(default=False)
    # The first line naming it, for the error when it never arrives.
    line = models.BigIntegerField(default=0)
    # The run that wrote it last: what the embedding task after an import reads.
    run_id = models.UUIDField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "source", "type", "old_id"], name="portability_map_old"
            )
        ]
        indexes = [models.Index(fields=["workspace", "run_id", "type", "state"], name="portability_map_run")]

    def __str__(self):
        return f"{self.type} {self.old_id} -> {self.new_id}"
