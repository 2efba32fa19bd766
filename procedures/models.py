from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import VectorField

from core.models import Agent, TimeStampedModel, Workspace

# The one active version of a lineage; procedures.services turns its violation into a 409.
ACTIVE_VERSION_CONSTRAINT = "procedures_active_version"


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
    # Stored, so a full-text search reads it instead of parsing search_text (steps included)
    # again for every row it matches, orders or counts words in (core.filters.text_search_relaxed).
    search_vector = models.GeneratedField(
        expression=SearchVector("search_text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    created_by = models.CharField(max_length=200, blank=True)
    # The trigger signature a self-learned procedure was proposed for
    # (procedures.services.learning.episode_signature); "" for every other procedure.
    learned_signature = models.CharField(max_length=300, blank=True, editable=False)

    objects = ProcedureQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "agent", "name", "version"],
                nulls_distinct=False,
                name="procedures_name_version",
            ),
            # One active version per lineage (the agent's versions of a name), even when two
            # activations race; the services lock the lineage, so this only refuses a write
            # that bypassed them.
            models.UniqueConstraint(
                fields=["workspace", "agent", "name"],
                condition=Q(is_active=True),
                nulls_distinct=False,
                name=ACTIVE_VERSION_CONSTRAINT,
            ),
            # One proposal per signature and agent, even when two learning passes race.
            models.UniqueConstraint(
                fields=["workspace", "agent", "learned_signature"],
                condition=~Q(learned_signature=""),
                nulls_distinct=False,
                name="procedures_learned_signature",
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "agent", "is_active"], name="procedures_workspace_agent"),
            # The browser's default newest-first page; without it every first page sorted
            # the whole workspace (~180 ms at 100,000 procedures, ~70 ms with it).
            models.Index(fields=["workspace", "-created_at"], name="procedures_recent"),
            GinIndex(fields=["search_vector"], name="procedures_search_fts", fastupdate=False),
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


class ProcedureRun(models.Model):
    """An episode counted as one run of a procedure, so a learning pass counts it once.

    Written by procedures.services.learning for episodes that name the procedure they
    followed and for episodes of a learned procedure's trigger signature. Runs reported
    through procedure_record_run carry no episode and leave no row.

    `memory_user` copies the episode's person (like a vector's), so a person's runs are
    one indexed read (the person page) and follow the episode through merges
    (core.holdings); erasing the episode deletes the run.
    """

    id = models.BigAutoField(primary_key=True)
    # Copied from the procedure, like every tier row, so a workspace's rows are one filter.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    procedure = models.ForeignKey(Procedure, on_delete=models.CASCADE, related_name="runs")
    episode = models.ForeignKey("episodes.Episode", on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(
        "identities.MemoryUser",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,  # procedures_run_by_person leads with it
    )
    success = models.BooleanField()
    counted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["procedure", "episode"], name="procedures_run_episode"),
        ]
        indexes = [
            models.Index(fields=["episode"], name="procedures_run_by_episode"),
            models.Index(fields=["memory_user", "procedure"], name="procedures_run_by_person"),
        ]

    def __str__(self):
        return f"{self.procedure_id} <- {self.episode_id}"


class ProcedureLearningState(models.Model):
    """Per workspace: when the last workspace-wide learning pass ran and when the sweep last
    looked, so the nudge and the beat task run a pass only when episodes changed since."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.OneToOneField(Workspace, on_delete=models.CASCADE, related_name="+")
    # Episode audit events after this time have not been seen by a pass.
    learned_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.workspace_id} learned {self.learned_at}"
