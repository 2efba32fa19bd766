from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import Agent, TimeStampedModel, Workspace


class Tier(models.TextChoices):
    """What a rule governs. Threads go by idleness (their last activity), the rest by age."""

    THREADS = "threads", "Threads (idle)"
    MESSAGES = "messages", "Messages"
    CHECKPOINTS = "checkpoints", "Checkpoints"
    RUN_SNAPSHOTS = "run_snapshots", "Run snapshots"
    EPISODIC_ENTRIES = "episodic_entries", "Episodic entries"
    EPISODES = "episodes", "Episodes"
    FACTS = "facts", "Facts"


class RetentionRule(TimeStampedModel):
    """How long one tier's rows are kept: older than `max_age_days` go, and beyond the newest
    `keep_latest` of their group (per thread, per person...) go. A workspace rule (no agent)
    applies to every agent without a rule of its own for that tier."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="retention_rules")
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="retention_rules"
    )
    tier = models.CharField(max_length=20, choices=Tier.choices)
    max_age_days = models.PositiveIntegerField(null=True, blank=True)
    keep_latest = models.PositiveIntegerField(null=True, blank=True)
    changed_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["tier", "agent__slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "tier"], condition=Q(agent__isnull=True), name="retention_rule_workspace"
            ),
            models.UniqueConstraint(
                fields=["agent", "tier"], condition=Q(agent__isnull=False), name="retention_rule_agent"
            ),
            models.CheckConstraint(
                condition=Q(max_age_days__gt=0) | Q(keep_latest__gt=0), name="retention_rule_has_a_limit"
            ),
        ]

    def __str__(self):
        return f"{self.tier} ({self.agent or 'workspace'})"


class RetentionRun(models.Model):
    """One pass of the engine over a workspace; at most one runs per workspace at a time."""

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        ABANDONED = "abandoned", "Abandoned"

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="retention_runs")
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    trigger = models.CharField(max_length=200, default="schedule")
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    deleted = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace"], condition=Q(state="running"), name="retention_run_one_running"
            )
        ]
        indexes = [models.Index(fields=["workspace", "-started_at"], name="retention_run_recent")]

    def __str__(self):
        return f"retention run {self.pk} ({self.state})"
