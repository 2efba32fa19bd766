from django.db import models
from django.utils import timezone

from core.models import Agent, TimeStampedModel, Workspace


class Episode(TimeStampedModel):
    """The record of one past run of an agent: what triggered it, what it did, how it went."""

    class Outcome(models.TextChoices):
        SUCCESS = "success", "Success"
        FAILURE = "failure", "Failure"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="episodes")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="episodes")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="episodes"
    )
    thread = models.ForeignKey(
        "threads.Thread", null=True, blank=True, on_delete=models.SET_NULL, related_name="episodes"
    )
    trigger_type = models.CharField(max_length=50, blank=True)
    trigger_payload = models.JSONField(default=dict, blank=True)
    input = models.JSONField(default=dict, blank=True)
    messages = models.JSONField(default=list, blank=True)
    actions = models.JSONField(default=list, blank=True, help_text="Tool calls with their results.")
    outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True)
    final_output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveBigIntegerField(null=True, blank=True)
    rating = models.PositiveSmallIntegerField(null=True, blank=True)
    feedback_comment = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["workspace", "memory_user", "-started_at"], name="episodes_user_recent"),
            models.Index(fields=["workspace", "agent", "-started_at"], name="episodes_agent_recent"),
        ]

    def __str__(self):
        return f"{self.trigger_type or 'episode'} {self.started_at:%Y-%m-%d %H:%M}"


class EpisodicEntry(TimeStampedModel):
    """A source-backed note about a person, readable only by (agent, memory user)."""

    class Source(models.TextChoices):
        USER_ASSERTION = "user_assertion", "User assertion"
        USER_ACCEPTED_PROPOSAL = "user_accepted_assistant_proposal", "User accepted assistant proposal"
        VERIFIED_FINDING = "verified_assistant_finding", "Verified assistant finding"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUPERSEDED = "superseded", "Superseded"
        REJECTED = "rejected", "Rejected"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="episodic_entries")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="episodic_entries")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", on_delete=models.CASCADE, related_name="episodic_entries"
    )
    content = models.TextField()
    content_hash = models.CharField(max_length=64)
    source = models.CharField(max_length=40, choices=Source.choices)
    evidence = models.TextField()
    source_thread = models.ForeignKey(
        "threads.Thread", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_message_ids = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "episodic entries"
        indexes = [
            models.Index(
                fields=["workspace", "agent", "memory_user", "-created_at"], name="episodes_entry_scope"
            ),
        ]

    def __str__(self):
        return self.content[:80]
