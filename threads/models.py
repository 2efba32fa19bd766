from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import VectorField

from core.lib.local_models import MPNET
from core.lib.vectors import hnsw_index, in_graph_field, outside_graph_index
from core.models import Agent, TimeStampedModel, Workspace


class ThreadQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)


class Thread(TimeStampedModel):
    """A conversation: identified by (agent, memory user, channel chat id)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="threads")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="threads")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="threads"
    )
    channel = models.CharField(max_length=50, blank=True)
    channel_chat_id = models.CharField(max_length=255, blank=True)
    client_key = models.CharField(max_length=255, blank=True)
    title = models.CharField(max_length=300, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    last_activity_at = models.DateTimeField(default=timezone.now)
    # The model the agent talks to in this thread; picks the context window for compaction.
    model = models.CharField(max_length=200, blank=True)
    # Per-thread message counter: appends take the row lock while bumping it, which both
    # orders messages and serializes concurrent appends (so "newest leaf" is well defined).
    message_seq = models.BigIntegerField(default=0)
    message_count = models.IntegerField(default=0)

    # Rolling compaction: a cumulative summary of the branch up to (and including) summary_upto.
    summary = models.TextField(blank=True)
    summary_upto_id = models.UUIDField(null=True, blank=True)
    summary_upto_depth = models.IntegerField(null=True, blank=True)
    # The summary's own size, and the branch token total (`Message.branch_tokens`) it replaces.
    summary_tokens = models.IntegerField(default=0)
    summary_covers_tokens = models.BigIntegerField(default=0)
    summary_method = models.CharField(max_length=20, blank=True)
    compacted_at = models.DateTimeField(null=True, blank=True)
    compaction_error = models.TextField(blank=True)
    # Lease of the compaction in progress (compare-and-set; an expired lease may be taken over).
    compaction_lease_until = models.DateTimeField(null=True, blank=True)
    # Set when a compaction is enqueued, so appends past the threshold enqueue it once.
    compaction_requested_at = models.DateTimeField(null=True, blank=True)
    # When a compaction last read the branch to the end, whether it wrote a summary or found
    # nothing new: every append before it was seen, so retention asks again only after a later one.
    compaction_checked_at = models.DateTimeField(null=True, blank=True)

    objects = ThreadQuerySet.as_manager()

    class Meta:
        ordering = ["-last_activity_at"]
        indexes = [
            models.Index(
                fields=["workspace", "agent", "memory_user", "channel_chat_id"],
                name="threads_identity",
            ),
            models.Index(fields=["workspace", "-last_activity_at"], name="threads_recent"),
            models.Index(fields=["agent", "last_activity_at"], name="threads_agent_activity"),
        ]

    def __str__(self):
        return self.title or f"Thread {self.pk}"


class MessageQuerySet(models.QuerySet):
    def for_workspace(self, workspace):
        return self.filter(workspace=workspace)

    def summarized(self):
        """The messages a summary of their scope holds alone (SummarizedMessage)."""
        return self.filter(models.Exists(SummarizedMessage.objects.filter(message_id=models.OuterRef("pk"))))


class Message(TimeStampedModel):
    """One chat message; `parent` links form the regeneration tree.

    `depth`, `jump_id`/`jump_depth` and `branch_tokens` are computed on write so the history
    window never loads the thread: `jump` is a skew-binary ancestor pointer (Myers, 1983),
    which finds the ancestor at any depth in O(log n) steps, and `branch_tokens` is the
    token total from the root to this message, so a branch's size is one subtraction.
    """

    class Role(models.TextChoices):
        SYSTEM = "system", "System"
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        TOOL = "tool", "Tool"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(blank=True)
    # DO_NOTHING in Python: deleting a whole thread is one fast DELETE; services that delete
    # part of a thread detach children first (the database constraint is deferred).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="children"
    )
    metadata = models.JSONField(default=dict, blank=True)

    seq = models.BigIntegerField(default=0)
    depth = models.IntegerField(default=0)
    jump_id = models.UUIDField(null=True, blank=True)
    jump_depth = models.IntegerField(default=0)
    token_count = models.IntegerField(default=0)
    branch_tokens = models.BigIntegerField(default=0)

    node_id = models.CharField(max_length=100, blank=True)
    author_agent = models.CharField(max_length=100, blank=True)
    delegation_id = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=100, blank=True)
    # [{"id", "name", "arguments" (a JSON string)}]
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True)
    # References only, never bytes: [{"type", "transfer_method", "file_id"|"url", "belongs_to", ...}]
    files = models.JSONField(default=list, blank=True)
    idempotency_key = models.CharField(max_length=200, blank=True)
    # A tool result over THREADS_TOOL_RESULT_ARCHIVE_CHARS: the window sends a reference instead.
    archived = models.BooleanField(default=False)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["thread", "node_id", "-seq"], name="threads_message_newest"),
            models.Index(fields=["thread", "seq"], name="threads_message_seq"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="threads_message_idempotency",
            ),
        ]

    def __str__(self):
        return f"{self.role}: {self.content[:60]}"


class ThreadPlan(models.Model):
    """One version of a thread's plan; every update adds a version, none is overwritten."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="plans")
    version = models.IntegerField()
    plan = models.JSONField(default=dict)
    actor = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "version"], name="threads_plan_version"),
        ]

    def __str__(self):
        return f"Plan v{self.version} of {self.thread_id}"


class RunSnapshot(models.Model):
    """The latest agent tree of one run, to rebuild visible progress after a reconnect."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="run_snapshots")
    run_id = models.CharField(max_length=200)
    snapshot = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "run_id"], name="threads_snapshot_run"),
        ]

    def __str__(self):
        return f"Run {self.run_id} of {self.thread_id}"


class IterationLog(models.Model):
    """One attempt at a task: the retry history a client appends to a sub-agent briefing."""

    class Outcome(models.TextChoices):
        SUCCESS = "success", "Success"
        FAILURE = "failure", "Failure"
        RETRY = "retry", "Retry"
        SKIPPED = "skipped", "Skipped"

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="iterations")
    task_key = models.CharField(max_length=200)
    attempt = models.IntegerField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    error = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["thread", "task_key", "attempt"], name="threads_iteration_task")]

    def __str__(self):
        return f"{self.task_key} #{self.attempt}: {self.outcome}"


class MessageEmbedding(models.Model):
    """Vectors of one thread message under one model, for semantic recall (n8n's tier 4).

    `embedding` encodes the message alone; `context_embedding` encodes it after the
    previous message of its thread, which finds answers whose meaning depends on the
    question they reply to. Scope columns are copied from the thread. Never serialized.
    """

    id = models.BigAutoField(primary_key=True)
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="+")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(
        "identities.MemoryUser", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    model = models.CharField(max_length=200)
    dimensions = models.PositiveIntegerField()
    embedding = VectorField()
    in_graph = in_graph_field()
    context_embedding = VectorField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # Created by the episodes app, which held message vectors until they moved to the
        # tier of the messages they encode; the name stays so that no row moves.
        db_table = "episodes_messageembedding"
        constraints = [
            models.UniqueConstraint(fields=["message", "model"], name="episodes_message_embedding_unique"),
        ]
        indexes = [
            models.Index(fields=["agent", "memory_user", "model"], name="episodes_msg_embedding_scope"),
            outside_graph_index("msg_emb_outside_graph", ["agent", "memory_user", "model"]),
            hnsw_index("msg_emb_graph", "embedding"),
            hnsw_index("msg_emb_mpnet_graph", "embedding", MPNET),
        ]

    def __str__(self):
        return f"{self.message_id} ({self.model})"


class SummarizedMessage(models.Model):
    """A message the summary of its scope (the thread's, or its node's) holds alone: above the
    summary's last message, on its branch, and on no other branch. What retention may delete.

    threads.services.compaction marks them as it writes a summary; an append that forks from
    one clears the marks at and above the fork. A row of its own, not a column of the message:
    marking a column rewrote each wide message row (its stored tsvector recomputed, every
    index written again), 5-6x the cost of these rows ("Summaries' marks" in docs/threads.md).
    """

    # The constraint is the database's own (migration 0010: ON DELETE CASCADE, checked at
    # insert), not Django's deferred one: a mark a compaction commits while its message is being
    # deleted goes with it, whichever deletion collected the marks before.
    message = models.OneToOneField(
        Message, on_delete=models.CASCADE, primary_key=True, db_constraint=False, related_name="+"
    )
    # The message's thread, to find a scope's marks without a join; no constraint of its own
    # (the message's holds it), and deleting a thread reaches the marks through its messages.
    thread = models.ForeignKey(Thread, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    node_id = models.CharField(max_length=100, blank=True)
    depth = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["thread", "node_id", "depth"], name="threads_summarized_scope")]

    def __str__(self):
        return f"{self.message_id} summarized"


class NodeSummary(models.Model):
    """The rolling summary of one node's messages (a delegated sub-agent's history).

    The thread's own summary covers the main conversation; a node compacted past the agent's
    `subagent_compress_at` share of the context window keeps its summary here, with the same
    fields and the same lease and request columns as `Thread`.
    """

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="node_summaries")
    node_id = models.CharField(max_length=100)
    summary = models.TextField(blank=True)
    summary_upto_id = models.UUIDField(null=True, blank=True)
    summary_upto_depth = models.IntegerField(null=True, blank=True)
    summary_tokens = models.IntegerField(default=0)
    summary_covers_tokens = models.BigIntegerField(default=0)
    summary_method = models.CharField(max_length=20, blank=True)
    compacted_at = models.DateTimeField(null=True, blank=True)
    compaction_error = models.TextField(blank=True)
    compaction_lease_until = models.DateTimeField(null=True, blank=True)
    compaction_requested_at = models.DateTimeField(null=True, blank=True)
    compaction_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["thread", "node_id"], name="threads_node_summary_node"),
        ]

    def __str__(self):
        return f"Summary of node {self.node_id} in {self.thread_id}"


class Transfer(models.Model):
    """Control of a thread handed from one agent to another at a message (Inkeep's transfer).

    The history window honours it for `agent=<slug>` (threads.selectors.window): the receiver
    sees the conversation up to `message`; the sender stops seeing other agents' later turns.
    """

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="transfers")
    from_agent = models.CharField(max_length=100)
    to_agent = models.CharField(max_length=100)
    reason = models.TextField(blank=True)
    # The last message the receiver is handed. An id, not a foreign key, like
    # Thread.summary_upto_id: deleting a thread stays one fast DELETE of its messages; a
    # transfer whose message is gone (a cleared node) is off every branch and applies to none.
    message_id = models.UUIDField()
    message_depth = models.IntegerField()
    # Both agents keep reading the main conversation whole: the sender still sees the receiver.
    shared = models.BooleanField(default=False)
    actor = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["message_depth", "id"]
        indexes = [models.Index(fields=["thread", "message_depth"], name="threads_transfer_depth")]

    def __str__(self):
        return f"{self.from_agent} -> {self.to_agent} at {self.message_id}"
