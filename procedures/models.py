from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import VectorField

from core.models import Agent, TimeStampedModel, Workspace


class ProcedureQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def active(self):
        return self.filter(is_active=True)

    def for_agent(self, agent):
        """Procedures an agent may use: its own and the workspace-wide ones (agent NULL)."""
        if agent is None:
            return self.filter(agent__isnull=True)
        return self.filter(Q(agent__isnull=True) | Q(agent=agent))


class Procedure(TimeStampedModel):
    """A reusable way of doing something: taught by a human, learned from episodes, or evolved.

    `trigger_conditions` follows the schema in docs/global-memory.md (validated by
    procedures.services.trigger_conditions_validate).
    """

    class ProcedureType(models.TextChoices):
        WORKFLOW_GRAPH = "workflow_graph", "Workflow graph"
        PROMPT_TEMPLATE = "prompt_template", "Prompt template"
        CODE_SNIPPET = "code_snippet", "Code snippet"
        TOOL_SEQUENCE = "tool_sequence", "Tool sequence"

    class Origin(models.TextChoices):
        HUMAN = "human", "Taught by a human"
        SELF_LEARNED = "self_learned", "Learned from episodes"
        EVOLVED = "evolved", "Evolved from a parent procedure"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="procedures")
    # NULL: every agent of the workspace may use it.
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="procedures"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    trigger_conditions = models.JSONField(default=dict, blank=True)
    procedure_type = models.CharField(max_length=20, choices=ProcedureType.choices)
    content = models.JSONField(help_text="A graph, template text, code or tool list, by type.")
    origin = models.CharField(max_length=15, choices=Origin.choices, default=Origin.HUMAN)
    source_episode_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    version = models.PositiveIntegerField(default=1)
    is_active = models.BooleanField(default=True)
    times_used = models.PositiveIntegerField(default=0)
    success_count = models.PositiveIntegerField(default=0)
    failure_count = models.PositiveIntegerField(default=0)
    # Sum and count of reported durations; the average is their quotient.
    total_duration_ms = models.PositiveBigIntegerField(default=0)
    timed_runs = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    search_text = models.TextField(blank=True, editable=False)
    created_by = models.CharField(max_length=200, blank=True)

    objects = ProcedureQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "agent", "name", "version"],
                nulls_distinct=False,
                name="procedures_name_version",
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "agent", "is_active"], name="procedures_workspace_agent"),
            # The browser's default newest-first page; without it every first page sorted
            # the whole workspace (~180 ms at 100,000 procedures, ~70 ms with it).
            models.Index(fields=["workspace", "-created_at"], name="procedures_recent"),
            GinIndex(SearchVector("search_text", config="english"), name="procedures_search_fts"),
        ]

    def __str__(self):
        return f"{self.name} v{self.version}"

    @property
    def success_rate(self) -> float | None:
        finished = self.success_count + self.failure_count
        return round(self.success_count / finished, 4) if finished else None

    @property
    def average_duration_ms(self) -> float | None:
        return round(self.total_duration_ms / self.timed_runs, 1) if self.timed_runs else None


class ProcedureEmbedding(models.Model):
    """The vector of a procedure's name, description and goal phrases under one model."""

    id = models.BigAutoField(primary_key=True)
    procedure = models.ForeignKey(Procedure, on_delete=models.CASCADE, related_name="embeddings")
    # Copied from the procedure, for the same cheap "any vectors yet" probe as facts.
    workspace = models.ForeignKey(Workspace, null=True, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    # The text embedded; a procedure edit that changes it replaces the vector.
    text_hash = models.CharField(max_length=64)
    embedding = VectorField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["procedure", "model"], name="procedures_embedding_unique")
        ]

    def __str__(self):
        return f"{self.procedure_id} ({self.model})"
