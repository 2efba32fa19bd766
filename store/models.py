"""LangGraph's long-term store: JSON items under hierarchical namespaces, and their vectors."""

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.utils import timezone
from pgvector.django import VectorField

from core.lib.local_models import MPNET
from core.lib.vectors import hnsw_index, in_graph_field, outside_graph_index
from core.models import Agent, TimeStampedModel, Workspace

# Labels never contain "." (LangGraph refuses it), so the dotted path names one namespace.
NAMESPACE_SEPARATOR = "."
LABEL_MAX_LENGTH = 255
KEY_MAX_LENGTH = 512


class StoreItemQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def live(self, now=None):
        """Items whose TTL has not run out (the sweep deletes the others later)."""
        now = now or timezone.now()
        return self.filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now))


class StoreItem(TimeStampedModel):
    """One item of a LangGraph store: `value` at (`namespace`, `key`).

    Items live in a partition: an agent's (`agent`), or the workspace's (`agent` NULL).
    An agent-bound key acts only in its agent's partition; a workspace key in the
    workspace's, or in an agent's it names. (namespace, key) is unique per partition.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # The person the item is about, when the writer says so: merge and erase follow it.
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="store_items"
    )
    namespace = ArrayField(models.CharField(max_length=LABEL_MAX_LENGTH))
    # The labels joined by ".", in the "C" collation: byte order makes a namespace prefix a
    # B-tree range (`path >= 'a.b.' AND path < 'a.b/'`), whatever the labels hold.
    namespace_path = models.TextField(db_collation="C")
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    value = models.JSONField()
    # The JSON paths embedded for search (LangGraph's `index`): ["$"] the whole value,
    # [] not indexed (`index=False`).
    index_fields = models.JSONField(default=list, blank=True)
    # The text at `index_fields`, what the vector and the lexical search read.
    search_text = models.TextField(blank=True, default="")
    search_vector = models.GeneratedField(
        expression=SearchVector("search_text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # LangGraph's TTL in minutes; reads that refresh it move `expires_at` forward.
    ttl_minutes = models.FloatField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # The model of the newest stored vector; blank until the item is embedded.
    embedding_model = models.CharField(max_length=200, blank=True, default="")

    objects = StoreItemQuerySet.as_manager()

    class Meta:
        ordering = ["namespace_path", "key"]
        constraints = [
            # NULLS NOT DISTINCT: the workspace partition (agent NULL) is one partition.
            models.UniqueConstraint(
                fields=["workspace", "agent", "namespace_path", "key"],
                name="store_item_unique",
                nulls_distinct=False,
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "-updated_at"], name="store_item_recent"),
            models.Index(
                fields=["expires_at"], name="store_item_expires", condition=models.Q(expires_at__isnull=False)
            ),
            models.Index(fields=["memory_user"], name="store_item_memory_user"),
            GinIndex(fields=["search_vector"], name="store_item_search", fastupdate=False),
            # `value @>` (a search's value filter, LangGraph's `search(filter=...)`): the items
            # holding the filter's pairs, instead of testing each item under the prefix.
            GinIndex(OpClass("value", name="jsonb_path_ops"), name="store_item_value", fastupdate=False),
        ]

    def __str__(self):
        return f"{NAMESPACE_SEPARATOR.join(self.namespace)}/{self.key}"


class StoreItemEmbedding(models.Model):
    """The vector of an item's indexed text under one embedding model."""

    id = models.BigAutoField(primary_key=True)
    item = models.ForeignKey(StoreItem, on_delete=models.CASCADE, related_name="embeddings")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    in_graph = in_graph_field()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "model"], name="store_item_embedding_unique"),
        ]
        indexes = [
            models.Index(fields=["workspace", "agent", "model"], name="store_item_emb_scope"),
            outside_graph_index("store_item_emb_outside_graph", ["workspace", "agent", "model"]),
            hnsw_index("store_item_emb_graph", "embedding"),
            hnsw_index("store_item_emb_mpnet_graph", "embedding", MPNET),
        ]

    def __str__(self):
        return f"{self.item_id} ({self.model})"
