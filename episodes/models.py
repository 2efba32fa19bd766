from django.db import models
from django.utils import timezone
from pgvector.django import VectorField

from core.lib.local_models import MPNET
from core.lib.vectors import hnsw_index, in_graph_field, outside_graph_index
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


class EpisodeEmbedding(models.Model):
    """The vector of an episode's rendered text (episodes.services.episode_embedding_text)
    under one embedding model, for searching episodes by meaning.

    One row per (episode, model): a provider change re-embeds in the background while the
    old vectors keep serving. An edit of the rendered text drops the episode's vectors and
    queues a new one. Scope is read through the episode (agent, memory user, outcome, time),
    so a merge that moves episodes to another person needs no vector update. Never
    serialized by the API.
    """

    id = models.BigAutoField(primary_key=True)
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="embeddings")
    # Copied from the episode (episodes never change workspace): the search's scope filter
    # and "does this workspace have vectors of this model" then read this table alone.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    in_graph = in_graph_field()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["episode", "model"], name="episodes_episode_embedding_unique"),
        ]
        indexes = [
            models.Index(fields=["workspace", "model"], name="episodes_episode_emb_scope"),
            outside_graph_index("episode_emb_outside_graph", ["workspace", "model"]),
            hnsw_index("episode_emb_graph", "embedding"),
            hnsw_index("episode_emb_mpnet_graph", "embedding", MPNET),
        ]

    def __str__(self):
        return f"{self.episode_id} ({self.model})"
