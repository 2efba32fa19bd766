from django.db import models
from django.utils import timezone

from core.models import Agent, TimeStampedModel, Workspace


class Thread(TimeStampedModel):
    """A conversation: identified by (agent, memory user, channel chat id)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="threads")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="threads")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="threads"
    )
    channel = models.CharField(max_length=50, blank=True)
    channel_chat_id = models.CharField(max_length=255, blank=True)
    client_key = models.CharField(max_length=255, blank=True)
    title = models.CharField(max_length=300, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    last_activity_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-last_activity_at"]
        indexes = [
            models.Index(
                fields=["workspace", "agent", "memory_user", "channel_chat_id"],
                name="threads_identity",
            ),
            models.Index(fields=["workspace", "-last_activity_at"], name="threads_recent"),
        ]

    def __str__(self):
        return self.title or f"Thread {self.pk}"


class Message(TimeStampedModel):
    class Role(models.TextChoices):
        SYSTEM = "system", "System"
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        TOOL = "tool", "Tool"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self):
        return f"{self.role}: {self.content[:60]}"
