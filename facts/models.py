import re

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from pgvector.django import VectorField

from core.models import Agent, TimeStampedModel, Workspace

_KEY_SEPARATORS = re.compile(r"[\s_\-]+")


# A fact's owner: the scope's reference (thread for session facts, memory user for user
# facts, agent for agent facts, workspace for global facts), which facts_scope_reference
# guarantees. "Visible in a context" is then `owner IN (<= 4 ids)`, each a narrow index range.
FACT_OWNER = Coalesce("thread", "memory_user", "agent", "workspace")


def key_normalize(key: str) -> str:
    """`Local-Time_zone` -> `local time zone`: spaces, underscores and hyphens are equivalent."""
    return _KEY_SEPARATORS.sub(" ", key).strip().lower()


class FactQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def current(self):
        """The open version of each key: history rows have a `valid_to`."""
        return self.filter(valid_to__isnull=True)

    def visible_in(self, *, agent=None, memory_user=None, thread=None):
        """Facts an agent sees while talking to `memory_user` in `thread`: every scope that applies."""
        condition = Q(scope=Fact.Scope.GLOBAL)
        if agent is not None:
            condition |= Q(scope=Fact.Scope.AGENT, agent=agent)
        if memory_user is not None:
            condition |= Q(scope=Fact.Scope.USER, memory_user=memory_user)
        if thread is not None:
            condition |= Q(scope=Fact.Scope.SESSION, thread=thread)
        return self.filter(condition)


class Fact(TimeStampedModel):
    """One version of a key's value in one scope. Values are never overwritten in place.

    A new value closes the current version (`valid_to`, `superseded_by`) and opens a new
    one, so the history of a key is the chain of its versions.
    """

    class FactType(models.TextChoices):
        USER_PREFERENCE = "user_preference", "User preference"
        WORLD_KNOWLEDGE = "world_knowledge", "World knowledge"
        SELF_KNOWLEDGE = "self_knowledge", "Self knowledge"
        CORRECTION = "correction", "Correction"
        RELATIONSHIP = "relationship", "Relationship"

    class Scope(models.TextChoices):
        SESSION = "session", "Session (one thread)"
        USER = "user", "User (one memory user)"
        AGENT = "agent", "Agent"
        GLOBAL = "global", "Global (whole workspace)"

    class Source(models.TextChoices):
        API = "api", "API"
        AGENT_TOOL = "agent_tool", "Agent tool"
        OPERATOR = "operator", "Operator"
        EXTRACTION = "extraction", "Extraction"

    class Review(models.TextChoices):
        # Every fact written before the review queue existed, or with review off, is approved.
        APPROVED = "approved", "Approved"
        HELD = "held", "Held for review"
        REJECTED = "rejected", "Rejected in review"
        MERGED = "merged", "Merged into another fact in review"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="facts")
    scope = models.CharField(max_length=10, choices=Scope.choices)
    # The scope's reference: session -> thread (agent and memory user copied from it so
    # agent-bound keys and erasure find the row), user -> memory_user, agent -> agent.
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="facts")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="facts"
    )
    thread = models.ForeignKey(
        "threads.Thread", null=True, blank=True, on_delete=models.CASCADE, related_name="facts"
    )
    key = models.CharField(max_length=255)
    # key_normalize(key); the trigram index on it serves fuzzy key search.
    key_normalized = models.CharField(max_length=255, editable=False)
    value = models.JSONField()
    # Normalized key words plus the value as text; full-text search reads its GIN index.
    search_text = models.TextField(blank=True, editable=False)
    # Stored, so a full-text filter reads it instead of re-parsing search_text per row.
    search_vector = models.GeneratedField(
        expression=SearchVector("search_text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    fact_type = models.CharField(max_length=20, choices=FactType.choices, default=FactType.WORLD_KNOWLEDGE)
    confidence = models.FloatField(default=0.8)
    times_confirmed = models.PositiveIntegerField(default=0)
    times_contradicted = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.API)
    source_message = models.ForeignKey(
        "threads.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_episode = models.ForeignKey(
        "episodes.Episode", null=True, blank=True, on_delete=models.SET_NULL, related_name="learned_facts"
    )
    evidence = models.TextField(blank=True)
    valid_from = models.DateTimeField(default=timezone.now)
    valid_to = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )
    # Start of the confidence half-life clock: creation, then every confirmation.
    last_confirmed_at = models.DateTimeField(default=timezone.now)
    access_count = models.PositiveIntegerField(default=0)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True)
    # The review queue (docs/review.md). A held or rejected fact is stored closed: its
    # valid_to equals its valid_from, an empty validity, so every read of current facts
    # (which all filter `valid_to IS NULL`) leaves it out and the one-open-version constraint
    # is untouched. Approval opens it as the key's current version.
    review = models.CharField(
        max_length=10, choices=Review.choices, default=Review.APPROVED, db_default=Review.APPROVED
    )
    review_note = models.TextField(blank=True, default="", db_default="")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The agent whose `review` setting held it: a user or global fact has no agent of its own.
    review_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = FactQuerySet.as_manager()

    class Meta:
        ordering = ["-confidence", "-valid_from"]
        constraints = [
            # One open version per key and scope reference. NULLS NOT DISTINCT makes two
            # global rows (all references NULL) collide as they should. The column order
            # serves fact_lookup: every scope branch is an equality prefix of this index.
            models.UniqueConstraint(
                fields=["workspace", "key", "scope", "memory_user", "agent", "thread"],
                condition=Q(valid_to__isnull=True),
                nulls_distinct=False,
                name="facts_current_key",
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0) & Q(confidence__lte=1), name="facts_confidence_range"
            ),
            models.CheckConstraint(
                condition=(
                    Q(scope="session", thread__isnull=False)
                    | Q(scope="user", memory_user__isnull=False, thread__isnull=True)
                    | Q(scope="agent", agent__isnull=False, memory_user__isnull=True, thread__isnull=True)
                    | Q(scope="global", agent__isnull=True, memory_user__isnull=True, thread__isnull=True)
                ),
                name="facts_scope_reference",
            ),
        ]
        indexes = [
            GinIndex(fields=["search_vector"], name="facts_search_fts", fastupdate=False),
            models.Index(
                fields=["workspace", "memory_user", "-valid_from"],
                condition=Q(valid_to__isnull=True),
                name="facts_user",
            ),
            models.Index(fields=["workspace", "key", "-valid_from"], name="facts_key_history"),
            models.Index(
                FACT_OWNER,
                F("confidence").desc(),
                F("valid_from").desc(),
                condition=Q(valid_to__isnull=True),
                name="facts_owner_confidence",
            ),
            models.Index(
                FACT_OWNER, F("key_normalized"), condition=Q(valid_to__isnull=True), name="facts_owner_key"
            ),
            # The review queue and its counts read only held rows.
            models.Index(
                fields=["workspace", "-created_at"], condition=Q(review="held"), name="facts_review"
            ),
        ]

    def __str__(self):
        return f"{self.key} ({self.scope})"

    @property
    def is_current(self) -> bool:
        return self.valid_to is None


class FactKey(models.Model):
    """The distinct normalized keys of a workspace: the dictionary fuzzy key search scans.

    A workspace has far fewer distinct keys than facts (every user has a `timezone`), so a
    trigram search here, followed by an indexed lookup of the matching keys among the facts
    visible in a context, stays fast at millions of facts. Rows are added by fact_remember
    and never needed for correctness elsewhere; a stale key simply matches no fact.
    """

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    key_normalized = models.CharField(max_length=255)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "key_normalized"], name="facts_key_dictionary_unique"
            )
        ]
        indexes = [
            GinIndex(
                fields=["key_normalized"],
                opclasses=["gin_trgm_ops"],
                name="facts_key_dictionary_trgm",
                fastupdate=False,
            )
        ]

    def __str__(self):
        return self.key_normalized


class FactEmbedding(models.Model):
    """The vector of one fact version under one embedding model, for semantic recall.

    One row per (fact, model): a provider change re-embeds in the background while the old
    vectors keep serving. Scope is read through the fact (its owner index), so a merge that
    moves facts needs no vector update. Never serialized by the API.
    """

    id = models.BigAutoField(primary_key=True)
    fact = models.ForeignKey(Fact, on_delete=models.CASCADE, related_name="embeddings")
    # Copied from the fact (facts never change workspace): "does this workspace have
    # vectors yet" is then an index probe, not a join the planner may turn into a scan.
    workspace = models.ForeignKey(Workspace, null=True, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["fact", "model"], name="facts_embedding_unique")]

    def __str__(self):
        return f"{self.fact_id} ({self.model})"
