"""Episodic memory: source-backed notes about a person and their vectors."""

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import IsNull
from django.utils import timezone
from pgvector.django import VectorField

from core.lib.local_models import MPNET
from core.lib.vectors import hnsw_index, in_graph_field, outside_graph_index
from core.models import Agent, TimeStampedModel, Workspace


class EpisodicEntry(TimeStampedModel):
    """A source-backed note about a person, readable only by (agent, memory user)."""

    class Source(models.TextChoices):
        USER_ASSERTION = "user_assertion", "User assertion"
        USER_ACCEPTED_PROPOSAL = "user_accepted_assistant_proposal", "User accepted assistant proposal"
        VERIFIED_FINDING = "verified_assistant_finding", "Verified assistant finding"
        # Stored by the agent (or an operator) directly, not extracted: the only source an entry
        # without evidence may have.
        AGENT_DIRECT = "agent_direct", "Stored directly by the agent"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUPERSEDED = "superseded", "Superseded"
        REJECTED = "rejected", "Rejected"

    class Review(models.TextChoices):
        # Every entry written before the review queue existed, and every entry of an agent
        # whose `review` setting is off, is approved.
        APPROVED = "approved", "Approved"
        HELD = "held", "Held for review"
        REJECTED = "rejected", "Rejected in review"
        MERGED = "merged", "Merged into another entry in review"

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
    # Validity, as facts keep it: a superseded entry is closed (valid_to, superseded_by,
    # status superseded) and kept; readers see only active entries unless they ask for history.
    valid_from = models.DateTimeField(default=timezone.now)
    valid_to = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )
    # Restatements of the same claim (a consolidation `noop`) confirm it instead of storing it again.
    times_confirmed = models.PositiveIntegerField(default=0)
    last_confirmed_at = models.DateTimeField(null=True, blank=True)
    # The consolidation decision that stored this entry next to a similar one
    # ({decision, reason, by, old, similarity}); empty when no similar entry was stored.
    consolidation = models.JSONField(default=dict, blank=True)
    # The model of the newest stored vector; blank until the embedding task has run.
    embedding_model = models.CharField(max_length=200, blank=True)
    # The review queue (docs/review.md): a held entry is never searched, injected or offered as
    # a duplicate twin to an entry that is not held itself; a rejected one is kept (status
    # rejected) so extraction does not propose it again.
    review = models.CharField(
        max_length=10, choices=Review.choices, default=Review.APPROVED, db_default=Review.APPROVED
    )
    review_note = models.TextField(blank=True, default="", db_default="")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Lexical search works from the moment the row is committed, before any vector lands.
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        # The table was created by the episodes app, which held this tier until it became
        # an app of its own; the name stays so that no row moves.
        db_table = "episodes_episodicentry"
        ordering = ["-created_at"]
        verbose_name_plural = "episodic entries"
        indexes = [
            models.Index(
                fields=["workspace", "agent", "memory_user", "-created_at"], name="episodes_entry_scope"
            ),
            models.Index(
                fields=["workspace", "agent", "memory_user", "content_hash"], name="episodes_entry_hash"
            ),
            GinIndex(fields=["search_vector"], name="episodes_entry_search", fastupdate=False),
            # `metadata @>` (the search's and the list's metadata filter): the entries holding
            # the labels, intersected with the person's scope, instead of testing each of the
            # person's rows (docs/speed.md, "A filtered search's kept entries from indexes").
            GinIndex(
                OpClass("metadata", name="jsonb_path_ops"), name="episodes_entry_metadata", fastupdate=False
            ),
            # The browser's workspace-wide newest-first page: without it every first page
            # sorted the whole workspace (~140 ms at 100,000 entries, ~88 ms with it).
            models.Index(fields=["workspace", "-created_at"], name="episodes_entry_recent"),
            # The review queue and its counts read only held rows: a partial index stays as
            # small as the queue however many approved entries the workspace holds.
            models.Index(
                fields=["workspace", "agent", "-created_at"],
                condition=models.Q(review="held"),
                name="episodes_entry_review",
            ),
            # What search reads: the active, approved entries of one (agent, person). BM25's
            # document count over the scope becomes an index-only scan instead of a heap read
            # per row (bench.episodic_perf --search-scales, docs/episodic.md Performance); with
            # the id and source held too, so are a filtered search's kept entries by time or
            # source (episodic.selectors.EntrySearchFilters, docs/speed.md).
            models.Index(
                fields=["workspace", "agent", "memory_user", "-created_at"],
                include=["id", "source"],
                condition=models.Q(status="active", review="approved"),
                name="episodes_entry_searchable",
            ),
            # The other rows of a scope (superseded, rejected, held, merged): the batch's
            # nearest-stored read leaves their vectors out from this small index instead of
            # probing the entry of every vector it reads (episodic.services.storing).
            models.Index(
                fields=["agent", "memory_user"],
                condition=~models.Q(status="active", review="approved"),
                name="episodes_entry_closed",
            ),
            # The entries taken from a message, by their first source message (the search's
            # neighbour term finds the entries of the turns around a hit's message). Partial:
            # entries written without a source, most of a large table, cost an add nothing.
            models.Index(
                KeyTextTransform("0", "source_message_ids"),
                condition=models.Q(IsNull(KeyTextTransform("0", "source_message_ids"), False)),
                name="episodes_entry_first_source",
            ),
        ]

    def __str__(self):
        return self.content[:80]


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
    in_graph = in_graph_field()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "episodes_entryembedding"
        constraints = [
            models.UniqueConstraint(fields=["entry", "model"], name="episodes_entry_embedding_unique"),
        ]
        indexes = [
            models.Index(fields=["agent", "memory_user", "model"], name="episodes_entry_emb_scope"),
            outside_graph_index("entry_emb_outside_graph", ["agent", "memory_user", "model"]),
            hnsw_index("entry_emb_graph", "embedding"),
            hnsw_index("entry_emb_mpnet_graph", "embedding", MPNET),
        ]

    def __str__(self):
        return f"{self.entry_id} ({self.model})"

    @classmethod
    def of(cls, entry: EpisodicEntry, vector, *, model: str) -> "EntryEmbedding":
        """`entry`'s `vector` under `model`, unsaved, the scope columns copied from the entry."""
        return cls(
            entry=entry,
            workspace_id=entry.workspace_id,
            agent_id=entry.agent_id,
            memory_user_id=entry.memory_user_id,
            model=model,
            dimensions=len(vector),
            embedding=vector,
        )
