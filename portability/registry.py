"""The record types of an export, in the order they are written and read (docs/export.md).

Each type names its model, the rows a scope exports, and the columns that name other rows:
foreign keys (`required` when NOT NULL), plain id columns and id lists. Everything else of
the row is copied as it is, except generated columns and the leases of work in progress.
"""

from dataclasses import dataclass, field

from django.db.models import F, Q, QuerySet

from checkpoints.models import Checkpoint, CheckpointWrite
from core.models import Agent, AuditEvent, Workspace
from episodes.models import Episode, EpisodeEmbedding
from episodic.models import EntryEmbedding, EpisodicEntry
from facts.models import Fact, FactEmbedding
from identities.models import ChannelIdentity, MemoryUser
from procedures.models import Procedure, ProcedureEmbedding, ProcedureRun
from store.models import StoreItem, StoreItemEmbedding
from threads.models import (
    IterationLog,
    Message,
    MessageEmbedding,
    NodeSummary,
    RunSnapshot,
    Thread,
    ThreadPlan,
    Transfer,
)

# Leases and requests of a compaction in progress belong to the source's workers.
_COMPACTION_STATE = ("compaction_lease_until", "compaction_requested_at")


@dataclass(frozen=True)
class Scope:
    """What one export holds: a whole workspace, one agent's rows, or one person's."""

    workspace: Workspace
    agent: Agent | None = None
    memory_user: MemoryUser | None = None
    history: bool = False
    vectors: bool = False

    @property
    def kind(self) -> str:
        if self.agent is not None:
            return "agent"
        if self.memory_user is not None:
            return "person"
        return "workspace"

    def describe(self) -> dict:
        out = {"kind": self.kind, "history": self.history, "vectors": self.vectors}
        if self.agent is not None:
            out["agent"] = self.agent.slug
        if self.memory_user is not None:
            out["memory_user"] = self.memory_user.canonical_id
        return out


@dataclass(frozen=True)
class RecordType:
    name: str
    model: type
    # Scope -> the rows exported, ordered so a row comes after the rows it needs.
    rows: object
    order: tuple
    exclude: tuple = ()
    # Plain uuid columns naming a row of a type: {"summary_upto_id": "message"}.
    id_columns: dict = field(default_factory=dict)
    # Columns holding a list of ids: {"source_message_ids": "message"}.
    id_lists: dict = field(default_factory=dict)
    # JSON object columns some of whose keys hold an id: {"consolidation": {"old": "episodic_entry"}}.
    json_ids: dict = field(default_factory=dict)
    # Columns that find the same row already in the target workspace (a conflict).
    natural_keys: tuple = ()
    vectors: bool = False
    # A vector's foreign key to the row it embeds: a vector of a row reused from the target is
    # not written (the target's row keeps its own).
    owner: str = ""
    history_only: bool = False

    @property
    def uuid_pk(self) -> bool:
        return self.model._meta.pk.get_internal_type() == "UUIDField"

    def fields(self):
        """The model fields a record carries, in model order (the pk and workspace apart)."""
        return [
            f
            for f in self.model._meta.concrete_fields
            if not f.primary_key and f.name != "workspace" and not f.generated and f.name not in self.exclude
        ]


# -- scopes ---------------------------------------------------------------------------------


def threads_in(s: Scope) -> QuerySet:
    qs = Thread.objects.filter(workspace=s.workspace)
    if s.agent is not None:
        qs = qs.filter(agent=s.agent)
    if s.memory_user is not None:
        qs = qs.filter(memory_user__in=people_in(s))
    return qs


def people_in(s: Scope) -> QuerySet:
    qs = MemoryUser.objects.filter(workspace=s.workspace)
    if s.memory_user is not None:
        return qs.filter(Q(pk=s.memory_user.pk) | Q(merged_into=s.memory_user.pk))
    if s.agent is not None:
        # The people the agent's rows are about; the workspace's other people are not its.
        return qs.filter(
            Q(pk__in=Thread.objects.filter(agent=s.agent).values("memory_user"))
            | Q(pk__in=Episode.objects.filter(agent=s.agent).values("memory_user"))
            | Q(pk__in=EpisodicEntry.objects.filter(agent=s.agent).values("memory_user"))
            | Q(pk__in=Fact.objects.filter(agent=s.agent).values("memory_user"))
            | Q(pk__in=StoreItem.objects.filter(agent=s.agent).values("memory_user"))
        )
    return qs


def agents_in(s: Scope) -> QuerySet:
    qs = Agent.objects.filter(workspace=s.workspace)
    if s.agent is not None:
        return qs.filter(pk=s.agent.pk)
    if s.memory_user is not None:
        people = people_in(s)
        return qs.filter(
            Q(pk__in=Thread.objects.filter(memory_user__in=people).values("agent"))
            | Q(pk__in=Episode.objects.filter(memory_user__in=people).values("agent"))
            | Q(pk__in=EpisodicEntry.objects.filter(memory_user__in=people).values("agent"))
            | Q(pk__in=Fact.objects.filter(memory_user__in=people, agent__isnull=False).values("agent"))
            | Q(pk__in=StoreItem.objects.filter(memory_user__in=people, agent__isnull=False).values("agent"))
        )
    return qs


def _owned(model, s: Scope) -> QuerySet:
    """Rows of a table with `agent` and `memory_user` columns, in scope."""
    qs = model.objects.filter(workspace=s.workspace)
    if s.agent is not None:
        qs = qs.filter(agent=s.agent)
    if s.memory_user is not None:
        qs = qs.filter(memory_user__in=people_in(s))
    return qs


def episodes_in(s: Scope) -> QuerySet:
    return _owned(Episode, s)


def facts_in(s: Scope) -> QuerySet:
    qs = _owned(Fact, s)
    return qs if s.history else qs.filter(valid_to__isnull=True)


def entries_in(s: Scope) -> QuerySet:
    qs = _owned(EpisodicEntry, s)
    return qs if s.history else qs.filter(valid_to__isnull=True)


def procedures_in(s: Scope) -> QuerySet:
    if s.memory_user is not None:
        return Procedure.objects.none()  # procedures are not about a person
    qs = Procedure.objects.filter(workspace=s.workspace)
    return qs.filter(agent=s.agent) if s.agent is not None else qs


def store_items_in(s: Scope) -> QuerySet:
    return _owned(StoreItem, s)


def messages_in(s: Scope) -> QuerySet:
    qs = Message.objects.filter(workspace=s.workspace)
    return qs if s.kind == "workspace" else qs.filter(thread__in=threads_in(s))


def _of_threads(model):
    def rows(s: Scope) -> QuerySet:
        qs = model.objects.filter(workspace=s.workspace)
        return qs if s.kind == "workspace" else qs.filter(thread__in=threads_in(s))

    return rows


# Whether a vector is in its model's HNSW graph is this server's index state, not memory: an
# imported vector is stored outside the graph like any new one (core.lib.vectors).
_GRAPH_STATE = ("in_graph",)


def _vectors_of(model, parent: str, parent_rows):
    def rows(s: Scope) -> QuerySet:
        # Only the source's current model: older vectors are stale spaces nobody searches.
        from core.embeddings import embedding_provider_for

        model_name = embedding_provider_for(s.workspace).model_name
        qs = model.objects.filter(**{f"{parent}__workspace": s.workspace}, model=model_name)
        return qs if s.kind == "workspace" and s.history else qs.filter(**{f"{parent}__in": parent_rows(s)})

    return rows


def _checkpoints_in(s: Scope) -> QuerySet:
    return _of_threads(Checkpoint)(s)


def _audit_in(s: Scope) -> QuerySet:
    # The trail is the workspace's: an agent's or a person's export leaves it out.
    if s.kind != "workspace":
        return AuditEvent.objects.none()
    return AuditEvent.objects.filter(workspace=s.workspace)


TYPES = (
    RecordType("agent", Agent, agents_in, ("slug",), natural_keys=(("slug",),)),
    RecordType(
        "memory_user",
        MemoryUser,
        people_in,
        # People another was merged into come first, so `merged_into` names a row already read.
        (F("merged_into_id").asc(nulls_first=True), "created_at", "canonical_id"),
        natural_keys=(("canonical_id",),),
    ),
    RecordType(
        "channel_identity",
        ChannelIdentity,
        lambda s: ChannelIdentity.objects.filter(workspace=s.workspace, memory_user__in=people_in(s)),
        ("channel", "external_id"),
        natural_keys=(("channel", "external_id"),),
    ),
    RecordType(
        "thread",
        Thread,
        threads_in,
        ("created_at", "id"),
        exclude=_COMPACTION_STATE,
        id_columns={"summary_upto_id": "message"},
    ),
    RecordType(
        "message",
        Message,
        messages_in,
        ("thread__created_at", "thread_id", "seq", "created_at"),
        id_columns={"jump_id": "message"},
    ),
    RecordType(
        "node_summary",
        NodeSummary,
        _of_threads(NodeSummary),
        ("thread__created_at", "thread_id", "node_id"),
        exclude=_COMPACTION_STATE,
        id_columns={"summary_upto_id": "message"},
    ),
    RecordType(
        "thread_plan", ThreadPlan, _of_threads(ThreadPlan), ("thread__created_at", "thread_id", "version")
    ),
    RecordType(
        "run_snapshot", RunSnapshot, _of_threads(RunSnapshot), ("thread__created_at", "thread_id", "run_id")
    ),
    RecordType(
        "iteration_log",
        IterationLog,
        _of_threads(IterationLog),
        ("thread__created_at", "thread_id", "at", "id"),
    ),
    RecordType(
        "transfer",
        Transfer,
        _of_threads(Transfer),
        ("thread__created_at", "thread_id", "message_depth", "id"),
        id_columns={"message_id": "message"},
    ),
    RecordType(
        "message_vector",
        MessageEmbedding,
        _vectors_of(MessageEmbedding, "message", messages_in),
        ("message__thread__created_at", "message__thread_id", "message__seq"),
        exclude=_GRAPH_STATE,
        vectors=True,
        owner="message",
    ),
    RecordType("episode", Episode, episodes_in, ("started_at", "created_at", "id")),
    RecordType(
        "episode_vector",
        EpisodeEmbedding,
        _vectors_of(EpisodeEmbedding, "episode", episodes_in),
        ("episode__started_at", "episode__created_at", "episode_id"),
        exclude=_GRAPH_STATE,
        vectors=True,
        owner="episode",
    ),
    RecordType("fact", Fact, facts_in, ("created_at", "key", "id")),
    RecordType(
        "fact_vector",
        FactEmbedding,
        _vectors_of(FactEmbedding, "fact", facts_in),
        ("fact__created_at", "fact__key", "fact_id"),
        vectors=True,
        owner="fact",
    ),
    RecordType(
        "episodic_entry",
        EpisodicEntry,
        entries_in,
        ("created_at", "content_hash", "id"),
        id_lists={"source_message_ids": "message"},
        # A held entry's consolidation names the stored entry its approval closes
        # (episodic.services.review): an id like any other, remapped on import.
        json_ids={"consolidation": {"old": "episodic_entry", "new": "episodic_entry"}},
    ),
    RecordType(
        "entry_vector",
        EntryEmbedding,
        _vectors_of(EntryEmbedding, "entry", entries_in),
        ("entry__created_at", "entry__content_hash", "entry_id"),
        exclude=_GRAPH_STATE,
        vectors=True,
        owner="entry",
    ),
    RecordType(
        "procedure",
        Procedure,
        procedures_in,
        ("created_at", "name", "version", "id"),
        id_lists={"source_episode_ids": "episode"},
        natural_keys=(("agent", "name", "version"), ("agent", "learned_signature")),
    ),
    RecordType(
        "procedure_vector",
        ProcedureEmbedding,
        _vectors_of(ProcedureEmbedding, "procedure", procedures_in),
        ("procedure__created_at", "procedure__name", "procedure_id"),
        vectors=True,
        owner="procedure",
    ),
    RecordType(
        "procedure_run",
        ProcedureRun,
        lambda s: ProcedureRun.objects.filter(
            workspace=s.workspace, procedure__in=procedures_in(s), episode__in=episodes_in(s)
        ),
        ("counted_at", "procedure__name", "episode__started_at"),
        # A copy of the episode's person: derived on import (procedure_runs_person_fill).
        exclude=("memory_user",),
    ),
    RecordType(
        "checkpoint",
        Checkpoint,
        _checkpoints_in,
        ("thread__created_at", "thread_id", "checkpoint_ns", "checkpoint_id"),
    ),
    RecordType(
        "checkpoint_write",
        CheckpointWrite,
        lambda s: CheckpointWrite.objects.filter(workspace=s.workspace, checkpoint__in=_checkpoints_in(s)),
        ("checkpoint__thread__created_at", "checkpoint__checkpoint_id", "task_path", "task_id", "idx"),
    ),
    RecordType(
        "store_item",
        StoreItem,
        store_items_in,
        ("namespace_path", "key", "agent__slug"),
        natural_keys=(("agent", "namespace_path", "key"),),
    ),
    RecordType(
        "store_item_vector",
        StoreItemEmbedding,
        _vectors_of(StoreItemEmbedding, "item", store_items_in),
        ("item__namespace_path", "item__key", "item__agent__slug"),
        exclude=_GRAPH_STATE,
        vectors=True,
        owner="item",
    ),
    RecordType(
        "audit_event",
        AuditEvent,
        _audit_in,
        ("at", "entity_type", "action"),
        exclude=("txid",),
        history_only=True,
    ),
)

BY_NAME = {t.name: t for t in TYPES}
BY_MODEL = {t.model: t for t in TYPES}
POSITION = {t.name: i for i, t in enumerate(TYPES)}
# Audit events name their entity by type and id; these types are remapped like any id.
AUDIT_ENTITY_TYPES = {
    "fact": "fact",
    "episodic_entry": "episodic_entry",
    "episode": "episode",
    "procedure": "procedure",
    "thread": "thread",
    "memory_user": "memory_user",
    "store_item": "store_item",
    "checkpoint": "checkpoint",
}
# Tables of rows that get vectors: re-embedded after an import that brings none of the
# target's model.
EMBEDDED_TYPES = ("message", "episode", "fact", "episodic_entry", "procedure", "store_item")


def record_key(f) -> str:
    """A field's key in a record; a column named like the record's own keys (a checkpoint's
    serializer `type`) takes a trailing underscore."""
    return f"{f.name}_" if f.name in ("type", "id") else f.name


def ref_type(f) -> str | None:
    """The record type a foreign key names; None for `workspace` (the target's)."""
    target = BY_MODEL.get(f.related_model)
    return target.name if target else None
