from django.contrib.postgres.fields import ArrayField
from django.db import models

from core.models import TimeStampedModel, Workspace


class WebhookSubscriptionQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def active(self):
        return self.filter(is_active=True)


class WebhookSubscription(TimeStampedModel):
    """A URL that receives a workspace's memory events, signed with the subscription's secret.

    Events are read from the audit trail, which every change writes in its own transaction;
    (`audit_txid_cursor`, `audit_id_cursor`) is the (txid, id) after which events have not
    been turned into deliveries yet (webhooks.services.webhooks_dispatch).
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhook_subscriptions")
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    # Event types (webhooks.events.EVENT_TYPES); empty: every type.
    events = ArrayField(models.CharField(max_length=50), default=list, blank=True)
    # Fernet-encrypted (core.lib.crypto): signing needs the plaintext.
    secret_encrypted = models.TextField()
    is_active = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=200, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    audit_txid_cursor = models.BigIntegerField(default=0)
    audit_id_cursor = models.BigIntegerField(default=0)
    last_delivery_at = models.DateTimeField(null=True, blank=True)

    objects = WebhookSubscriptionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["workspace", "is_active"], name="webhooks_sub_active")]

    def __str__(self):
        return self.url

    def wants(self, event_type: str) -> bool:
        return not self.events or event_type in self.events


class WebhookDelivery(TimeStampedModel):
    """One event sent (or to be sent) to one subscription, with every attempt's outcome."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RETRYING = "retrying", "Retrying"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries")
    # Null for events that are not audit events (a ping).
    audit_event_id = models.BigIntegerField(null=True, blank=True)
    event_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=50)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "audit_event_id"],
                condition=models.Q(audit_event_id__isnull=False),
                name="webhooks_delivery_once",
            )
        ]
        indexes = [
            models.Index(fields=["subscription", "-created_at"], name="webhooks_delivery_recent"),
            models.Index(fields=["status", "next_attempt_at"], name="webhooks_delivery_due"),
        ]

    def __str__(self):
        return f"{self.event_type} -> {self.subscription_id} ({self.status})"
