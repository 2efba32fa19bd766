"""Reflection runs (one per agent at a time) and the compact profiles they cache."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import Agent, TimeStampedModel, Workspace


class ReflectionRunQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def active(self):
        return self.filter(state__in=ReflectionRun.ACTIVE_STATES)


class ReflectionRun(TimeStampedModel):
    """One reflection pass over an agent's memory, resumable from `cursor`."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        # The workspace's LLM budget is spent and its policy is `wait`: resumes at resume_after.
        WAITING = "waiting", "Waiting for the LLM budget"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class Method(models.TextChoices):
        LLM = "llm", "LLM"
        OFFLINE = "offline", "Offline (deterministic rules)"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", "Schedule"
        API = "api", "API"
        OPERATOR = "operator", "Operator"

    ACTIVE_STATES = (State.QUEUED, State.RUNNING, State.WAITING)

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="reflection_runs")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="reflection_runs")
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.SCHEDULE)
    created_by = models.CharField(max_length=200, blank=True)
    method = models.CharField(max_length=10, choices=Method.choices, default=Method.OFFLINE)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # People of the agent to reflect on (the unit of progress), fixed when the run starts.
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    merged = models.PositiveIntegerField(default=0)
    retired = models.PositiveIntegerField(default=0)
    profiles_refreshed = models.PositiveIntegerField(default=0)
    tokens_used = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True)
    # {"people": [memory user ids, sorted]}; progress_done indexes into it.
    cursor = models.JSONField(default=dict, blank=True)
    # A step holds the run until then (compare-and-set); a lapsed lease marks a lost worker.
    lease_until = models.DateTimeField(null=True, blank=True)
    resume_after = models.DateTimeField(null=True, blank=True)

    objects = ReflectionRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One run per agent at a time: a second start finds the first.
            models.UniqueConstraint(
                fields=["agent"],
                condition=Q(state__in=["queued", "running", "waiting"]),
                name="reflection_run_one_active",
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "-created_at"], name="reflection_run_recent"),
            models.Index(fields=["agent", "-created_at"], name="reflection_run_agent"),
        ]

    def __str__(self):
        return f"{self.agent} {self.state} {self.progress_done}/{self.progress_total}"

    @property
    def percent(self) -> int:
        if not self.progress_total:
            return 100 if self.state == self.State.DONE else 0
        return min(100, round(100 * self.progress_done / self.progress_total))

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES


class ReflectionProfile(TimeStampedModel):
    """A compact profile of one person as one agent knows them, rebuilt by each reflection run."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="reflection_profiles")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", on_delete=models.CASCADE, related_name="reflection_profiles"
    )
    text = models.TextField()
    method = models.CharField(max_length=10, choices=ReflectionRun.Method.choices)
    facts_used = models.PositiveIntegerField(default=0)
    entries_used = models.PositiveIntegerField(default=0)
    refreshed_at = models.DateTimeField(default=timezone.now)
    run = models.ForeignKey(ReflectionRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-refreshed_at"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "memory_user"], name="reflection_profile_unique"),
        ]
        indexes = [models.Index(fields=["workspace", "-refreshed_at"], name="reflection_profile_recent")]

    def __str__(self):
        return f"{self.memory_user_id} by {self.agent_id}"
