from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from core.embeddings import LOCAL_MODEL_DIMENSIONS, LOCAL_MODEL_NAME
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
            # The browser's workspace-wide newest-first page (bench.browser_tabs).
            models.Index(fields=["workspace", "-started_at"], name="episodes_recent"),
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
    # The model of the newest stored vector; blank until the embedding task has run.
    embedding_model = models.CharField(max_length=200, blank=True)
    # Lexical search works from the moment the row is committed, before any vector lands.
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "episodic entries"
        indexes = [
            models.Index(
                fields=["workspace", "agent", "memory_user", "-created_at"], name="episodes_entry_scope"
            ),
            models.Index(
                fields=["workspace", "agent", "memory_user", "content_hash"], name="episodes_entry_hash"
            ),
            GinIndex(fields=["search_vector"], name="episodes_entry_search"),
            # The browser's workspace-wide newest-first page: without it every first page
            # sorted the whole workspace (~140 ms at 100,000 entries, ~88 ms with it).
            models.Index(fields=["workspace", "-created_at"], name="episodes_entry_recent"),
        ]

    def __str__(self):
        return self.content[:80]


def _hnsw_index(name: str, column: str) -> HnswIndex:
    # The column holds vectors of any length (one row per model), so the index covers one
    # model through a cast to its fixed dimension; queries must repeat the cast and the
    # model condition or the planner cannot use it.
    return HnswIndex(
        OpClass(Cast(column, VectorField(dimensions=LOCAL_MODEL_DIMENSIONS)), name="vector_cosine_ops"),
        name=name,
        condition=Q(model=LOCAL_MODEL_NAME),
        m=16,
        ef_construction=64,
    )


class EntryEmbedding(models.Model):
    """One vector of an episodic entry under one embedding model.

    A separate row per (entry, model) lets a model change re-embed in the background while
    searches keep using the old model's vectors. The scope columns are copied from the
    entry so a search filters and sorts this table alone. Never serialized by the API.
    """

    id = models.BigAutoField(primary_key=True)
    entry = models.ForeignKey(EpisodicEntry, on_delete=models.CASCADE, related_name="embeddings")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey("identities.MemoryUser", on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["entry", "model"], name="episodes_entry_embedding_unique"),
        ]
        indexes = [
            models.Index(fields=["agent", "memory_user", "model"], name="episodes_entry_emb_scope"),
            _hnsw_index("episodes_entry_embedding_hnsw", "embedding"),
        ]

    def __str__(self):
        return f"{self.entry_id} ({self.model})"


class MessageEmbedding(models.Model):
    """Vectors of one thread message under one model, for semantic recall (n8n's tier 4).

    `embedding` encodes the message alone; `context_embedding` encodes it after the
    previous message of its thread, which finds answers whose meaning depends on the
    question they reply to. Scope columns are copied from the thread. Never serialized.
    """

    id = models.BigAutoField(primary_key=True)
    message = models.ForeignKey("threads.Message", on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey("threads.Thread", on_delete=models.CASCADE, related_name="+")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    context_embedding = VectorField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "model"], name="episodes_message_embedding_unique"),
        ]
        indexes = [
            models.Index(fields=["agent", "memory_user", "model"], name="episodes_msg_embedding_scope"),
            _hnsw_index("episodes_msg_embedding_hnsw", "embedding"),
        ]

    def __str__(self):
        return f"{self.message_id} ({self.model})"
