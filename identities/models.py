from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models.functions import Upper
from django.utils import timezone

from core.models import TimeStampedModel, Workspace


class MemoryUserQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def active(self):
        """Users that have not been merged into another one."""
        return self.filter(merged_into__isnull=True)


class MemoryUser(TimeStampedModel):
    """A person an agent talks to, across channels. Never named `User`: that is an operator."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memory_users")
    canonical_id = models.CharField(max_length=255, help_text="For example telegram:12345.")
    display_name = models.CharField(max_length=200, blank=True)
    # Kept in step with the user-scope `user_preference` facts by facts.services.
    preferences = models.JSONField(default=dict, blank=True)
    merged_into = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="merged_from"
    )
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    # A legal hold keeps everything of this person: the retention engine skips their rows and
    # erasure is refused until the hold is released. Set when `legal_hold_at` is not NULL.
    legal_hold_at = models.DateTimeField(null=True, blank=True)
    legal_hold_reason = models.CharField(max_length=500, blank=True)
    legal_hold_by = models.CharField(max_length=200, blank=True)

    objects = MemoryUserQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "canonical_id"], name="identities_user_canonical")
        ]
        indexes = [
            models.Index(fields=["workspace", "-last_seen_at"], name="identities_user_recent"),
            models.Index(fields=["workspace", "display_name"], name="identities_user_name"),
            # Substring search of people (`q`: the users tab, the header search) is
            # `UPPER(col) LIKE UPPER('%text%')`, which only a trigram index can serve: without
            # it every search read every person of the table (docs/browser.md).
            GinIndex(
                OpClass(Upper("display_name"), name="gin_trgm_ops"),
                OpClass(Upper("canonical_id"), name="gin_trgm_ops"),
                name="identities_user_names_trgm",
                fastupdate=False,
            ),
        ]

    def __str__(self):
        return self.display_name or self.canonical_id


class ChannelIdentity(TimeStampedModel):
    """How a person appears on one channel (telegram, email, slack, web, ...)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="identities")
    channel = models.CharField(max_length=50)
    external_id = models.CharField(max_length=255)
    profile = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["channel", "external_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "channel", "external_id"], name="identities_channel_external"
            )
        ]
        indexes = [
            # Substring search of channel ids (as MemoryUser's names above).
            GinIndex(
                OpClass(Upper("external_id"), name="gin_trgm_ops"),
                name="identities_external_trgm",
                fastupdate=False,
            ),
        ]

    def __str__(self):
        return f"{self.channel}:{self.external_id}"
