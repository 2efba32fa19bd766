import uuid

from django.conf import settings
from django.db import models
from django.db.models import Func, Q
from django.db.models.functions import Cast
from django.utils import timezone


class TimeStampedModel(models.Model):
    """Base of every memory row: a UUID id and creation/update times."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class WorkspaceQuerySet(models.QuerySet):
    def for_user(self, user):
        if user.is_superuser:
            return self.all()
        return self.filter(memberships__user=user)


class Workspace(TimeStampedModel):
    name = models.CharField(max_length=100, unique=True)

    objects = WorkspaceQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Membership(TimeStampedModel):
    class Role(models.TextChoices):
        VIEWER = "viewer", "Viewer"
        EDITOR = "editor", "Editor"
        ADMIN = "admin", "Admin"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="core_membership_unique")]

    def __str__(self):
        return f"{self.user} in {self.workspace} ({self.role})"

    @property
    def can_edit(self) -> bool:
        return self.role in (self.Role.EDITOR, self.Role.ADMIN)

    @property
    def can_admin(self) -> bool:
        return self.role == self.Role.ADMIN


class AgentQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)


class Agent(TimeStampedModel):
    """An agent registered in a workspace; its memory_settings override the defaults."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agents")
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=200, blank=True)
    # Validated by core.memory_settings; only overridden keys are stored.
    memory_settings = models.JSONField(default=dict, blank=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "slug"], name="core_agent_workspace_slug")
        ]

    def __str__(self):
        return self.slug


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


class ApiKey(TimeStampedModel):
    """A REST credential. Only a SHA-256 of the secret is stored; the secret is shown once."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    read_only = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.prefix}… ({self.workspace})"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()


class ProviderCredential(TimeStampedModel):
    """An OpenAI-compatible endpoint for a workspace. The key is encrypted at rest."""

    class Purpose(models.TextChoices):
        CHAT = "chat", "Chat (compaction, extraction)"
        EMBEDDING = "embedding", "Embeddings"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="provider_credentials")
    purpose = models.CharField(max_length=10, choices=Purpose.choices)
    base_url = models.URLField(max_length=500)
    model = models.CharField(max_length=200)
    api_key_encrypted = models.TextField(blank=True, editable=False)
    # A superuser saved it (core.admin): its host may be a private address (a self-hosted
    # model), at send time too. Otherwise only PROVIDER_ALLOW_PRIVATE_URLS lets one through
    # (core.lib.addresses.provider_target).
    private_allowed = models.BooleanField(default=False, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "purpose"], name="core_provider_workspace_purpose")
        ]

    def __str__(self):
        return f"{self.purpose}: {self.model} at {self.base_url}"


class WorkerHeartbeat(models.Model):
    """One row per worker host name, refreshed by a periodic task; read by /readyz."""

    worker = models.CharField(max_length=200, primary_key=True)
    beat_at = models.DateTimeField()

    def __str__(self):
        return f"{self.worker} at {self.beat_at:%Y-%m-%d %H:%M:%S}"


class AuditEvent(models.Model):
    """Who changed what, for every create, update and delete of curated memory."""

    class Action(models.TextChoices):
        CREATE = "create", "Create"
        UPDATE = "update", "Update"
        DELETE = "delete", "Delete"
        MERGE = "merge", "Merge"
        ERASE = "erase", "Erase"

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="audit_events")
    at = models.DateTimeField(default=timezone.now)
    # "api_key:<prefix>", "operator:<username>", "system" (tasks) or "admin:<username>".
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=10, choices=Action.choices)
    entity_type = models.CharField(max_length=50)
    entity_id = models.CharField(max_length=64)
    changes = models.JSONField(default=dict, blank=True)
    # The writing transaction's id (pg_current_xact_id). Readers of the trail as an outbox
    # (webhooks) take only events of transactions older than every running one, so no event
    # can still appear behind what they have read. NULL for events older than the column.
    txid = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        db_default=Cast(
            Cast(Func(function="pg_current_xact_id"), models.TextField()), models.BigIntegerField()
        ),
    )

    class Meta:
        ordering = ["-at"]
        indexes = [
            models.Index(fields=["workspace", "entity_type", "entity_id"], name="core_audit_entity"),
            models.Index(fields=["workspace", "-at"], name="core_audit_recent"),
            models.Index(fields=["workspace", "txid", "id"], name="core_audit_outbox"),
        ]

    def __str__(self):
        return f"{self.action} {self.entity_type} {self.entity_id} by {self.actor}"


class LLMBudget(models.Model):
    """A workspace's daily token budget for LLM work; a workspace without a row, or a blank
    field, uses the settings (LLM_DAILY_TOKEN_BUDGET, LLM_BUDGET_POLICY). core.lib.llm_budget."""

    class Policy(models.TextChoices):
        FALLBACK = "fallback", "Fall back to the offline method"
        WAIT = "wait", "Wait until the budget resets"

    workspace = models.OneToOneField(Workspace, on_delete=models.CASCADE, related_name="llm_budget")
    # Tokens (prompt + completion) per UTC day; 0 blocks every call, NULL: the settings default.
    daily_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    policy = models.CharField(max_length=10, choices=Policy.choices, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "LLM budget"

    def __str__(self):
        return f"{self.workspace}: {self.daily_tokens if self.daily_tokens is not None else 'default'}"


class LLMUsage(models.Model):
    """Tokens a workspace's LLM calls used on one UTC day for one purpose, from the provider's
    `usage` fields; rows are counters raised by UPDATE ... F(), never rewritten."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="llm_usage")
    day = models.DateField()
    purpose = models.CharField(max_length=30)
    calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    total_tokens = models.PositiveBigIntegerField(default=0)
    # Calls refused because the day's budget was spent.
    refused = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-day", "purpose"]
        verbose_name = "LLM usage"
        verbose_name_plural = "LLM usage"
        constraints = [
            models.UniqueConstraint(fields=["workspace", "day", "purpose"], name="core_llm_usage_day_purpose")
        ]

    def __str__(self):
        return f"{self.workspace} {self.day} {self.purpose}: {self.total_tokens}"


class LLMJob(models.Model):
    """LLM-bound work waiting its workspace's turn (core.lib.fair_queue): the broker holds at
    most LLM_JOBS_PER_WORKSPACE of a workspace's jobs at once, so one tenant's backlog waits
    here instead of in front of every other tenant's work."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        SENT = "sent", "Sent to a worker"
        DONE = "done", "Done"

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # A registered Celery task name; it receives `kwargs` plus `llm_job_id`.
    task = models.CharField(max_length=200)
    kwargs = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    created_at = models.DateTimeField(default=timezone.now)
    # Not dispatched before this time: work deferred until the workspace's budget day rolls over.
    not_before = models.DateTimeField(null=True, blank=True)
    # Requests of the same work (a thread's compaction) share one queued job.
    dedupe_key = models.CharField(max_length=200, blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["state", "workspace", "created_at"], name="core_llm_job_queue"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["dedupe_key"],
                condition=models.Q(state="queued") & ~models.Q(dedupe_key=""),
                name="core_llm_job_one_queued_per_key",
            ),
        ]

    def __str__(self):
        return f"{self.task} ({self.state})"
