"""Reads of the audit trail page: the workspace's audit events filtered by actor, tier, person,
action and time; each event's `changes` as before/after rows; the entities a page of events
names, with a label and whether each still exists.

Audit events have no person column. An event is about a person when it names the person
(`memory_user`) or a row that belongs to them now: their facts (every version), episodic
entries, episodes, store items, threads and the threads' checkpoints and transfers. Events
about rows deleted since then name ids that no longer resolve, so a person filter cannot
attribute them; the unfiltered trail still lists them.
"""

import json
import uuid
from dataclasses import dataclass

import django_filters
from django.db.models import CharField, Q, Value
from django.db.models.functions import Cast

from core.access import Principal
from core.filters import FilterSet, filterset_apply
from core.models import AuditEvent

# (slug, label, entity types). The slug is the `tier` filter's value.
AUDIT_TIERS = [
    ("facts", "Facts", ("fact",)),
    ("entries", "Episodic entries", ("episodic_entry",)),
    ("episodes", "Episodes", ("episode",)),
    ("procedures", "Procedures", ("procedure",)),
    ("people", "People", ("memory_user",)),
    ("threads", "Threads and messages", ("thread", "thread_node_messages", "thread_transfer")),
    ("checkpoints", "Checkpoints", ("checkpoint", "checkpoints", "thread_checkpoints")),
    ("store", "Store", ("store_item",)),
    ("members", "Members", ("membership",)),
    ("webhooks", "Webhooks", ("webhook_subscription",)),
]
# Who joined or left the workspace and where its events are sent are for admins, as the
# Members and Webhooks pages are; editors see every memory tier's changes.
ADMIN_TIERS = ("members", "webhooks")
ADMIN_ENTITY_TYPES = tuple(t for slug, _, types in AUDIT_TIERS if slug in ADMIN_TIERS for t in types)
TIER_OF_TYPE = {t: label for _, label, types in AUDIT_TIERS for t in types}

# Lists in `changes` that are values, not a [before, after] pair.
LIST_VALUES = frozenset({"fields", "ids", "erased_with", "keys_before", "keys_after", "events"})
# A value longer than this is cut on the page (the CSV carries it whole).
CHANGE_CHARS = 300


def _as_text(expression):
    return Cast(expression, CharField())


# A person's rows are read as ids first (one UNION query), so the filter is index lookups on
# core_audit_entity; as subqueries, PostgreSQL walked the whole trail testing each event
# (100,000 events: ~150 ms). A person with more rows than this gets the subquery form.
PERSON_IDS_CAP = 20_000
THREAD_ENTITY_TYPES = ("thread", "thread_node_messages", "thread_checkpoints")


def person_entity_filter(*, workspace, memory_user_id) -> Q:
    """Events about the person `memory_user_id` (and people merged into them), as a Q over
    (entity_type, entity_id)."""
    from checkpoints.models import Checkpoint
    from episodes.models import Episode
    from episodic.models import EpisodicEntry
    from facts.models import Fact
    from identities.models import MemoryUser
    from identities.selectors import memory_user_merged_ids
    from store.models import StoreItem
    from threads.models import Thread, Transfer

    person = MemoryUser.objects.filter(workspace=workspace, pk=memory_user_id).first()
    if person is None:
        return Q(pk__in=[])
    # Every record merged into them, along chains of merges too (older data: A into B into C).
    people = memory_user_merged_ids(memory_user=person)
    threads = Thread.objects.filter(workspace=workspace, memory_user__in=people)
    owned = {
        "fact": Fact.objects.filter(workspace=workspace, memory_user__in=people),
        "episodic_entry": EpisodicEntry.objects.filter(workspace=workspace, memory_user__in=people),
        "episode": Episode.objects.filter(workspace=workspace, memory_user__in=people),
        "store_item": StoreItem.objects.filter(workspace=workspace, memory_user__in=people),
        "checkpoint": Checkpoint.objects.filter(workspace=workspace, thread__in=threads),
        "thread_transfer": Transfer.objects.filter(thread__in=threads),
        "thread": threads,
    }
    parts = [
        queryset.order_by()
        .annotate(kind=Value(entity_type, output_field=CharField()), entity=_as_text("pk"))
        .values_list("kind", "entity")
        for entity_type, queryset in owned.items()
    ]
    rows = list(parts[0].union(*parts[1:], all=True)[: PERSON_IDS_CAP + 1])
    condition = Q(entity_type="memory_user", entity_id__in=[str(p) for p in people])
    if len(rows) > PERSON_IDS_CAP:
        for entity_type, queryset in owned.items():
            types = THREAD_ENTITY_TYPES if entity_type == "thread" else (entity_type,)
            ids = queryset.annotate(entity=_as_text("pk")).values("entity")
            condition |= Q(entity_type__in=types, entity_id__in=ids)
        return condition
    by_type: dict = {}
    for entity_type, entity_id in rows:
        by_type.setdefault(entity_type, []).append(entity_id)
    for entity_type, ids in by_type.items():
        types = THREAD_ENTITY_TYPES if entity_type == "thread" else (entity_type,)
        condition |= Q(entity_type__in=types, entity_id__in=ids)
    return condition


class AuditEventFilter(FilterSet):
    """Filters of the audit trail page and its CSV export. Pass `principal=`: the person is
    looked up in its workspace, and the admin-only tiers are offered to admins only."""

    actor = django_filters.CharFilter(
        field_name="actor", lookup_expr="icontains", label="Actor", max_length=200
    )
    tier = django_filters.MultipleChoiceFilter(
        choices=[(slug, label) for slug, label, _ in AUDIT_TIERS], method="filter_tier", label="Tier"
    )
    action = django_filters.MultipleChoiceFilter(choices=AuditEvent.Action.choices, label="Action")
    # Named as every tier names it, so the person picker (browser.lib.pickers) serves it.
    memory_user = django_filters.UUIDFilter(method="filter_memory_user", label="Person")
    entity_id = django_filters.CharFilter(field_name="entity_id", label="Entity id", max_length=64)
    after = django_filters.DateTimeFilter(field_name="at", lookup_expr="gte", label="From")
    before = django_filters.DateTimeFilter(field_name="at", lookup_expr="lt", label="Until")

    class Meta:
        model = AuditEvent
        fields = []

    def __init__(self, data=None, *args, principal: Principal | None = None, **kwargs):
        super().__init__(data, *args, **kwargs)
        self.principal = principal
        if principal is not None and not principal.can_admin:
            field = self.filters["tier"]
            field.extra["choices"] = [c for c in field.extra["choices"] if c[0] not in ADMIN_TIERS]

    def filter_tier(self, queryset, name, value):
        if not value:
            return queryset
        types = [t for slug, _, types in AUDIT_TIERS if slug in value for t in types]
        return queryset.filter(entity_type__in=types)

    def filter_memory_user(self, queryset, name, value):
        return queryset.filter(person_entity_filter(workspace=self.principal.workspace, memory_user_id=value))


def audit_event_scope(principal: Principal):
    events = AuditEvent.objects.filter(workspace=principal.workspace)
    if not principal.can_admin:
        events = events.exclude(entity_type__in=ADMIN_ENTITY_TYPES)
    return events


def audit_event_list(*, principal: Principal, filters=None):
    """The principal's workspace's audit events matching `filters`, newest first."""
    events = filterset_apply(AuditEventFilter, filters, audit_event_scope(principal), principal=principal)
    return events.order_by("-at", "-pk")


@dataclass(frozen=True)
class Change:
    field: str
    before: object
    after: object
    paired: bool  # True: `before` and `after` are the two sides; False: `after` is the value

    @property
    def before_text(self) -> str:
        return change_text(self.before)

    @property
    def after_text(self) -> str:
        return change_text(self.after)


def audit_changes(event) -> list[Change]:
    """`event.changes` as rows. Services record an edit as {"from", "to"} or [before, after]
    (an update's two-item list), a superseded fact as value and previous_value, a checkpoint's
    metadata as keys_before and keys_after; anything else is a value as recorded."""
    changes = event.changes if isinstance(event.changes, dict) else {"changes": event.changes}
    rows = []
    skip = set()
    if "previous_value" in changes and "value" in changes:
        rows.append(Change("value", changes["previous_value"], changes["value"], True))
        skip |= {"previous_value", "value"}
    if "keys_before" in changes and "keys_after" in changes:
        rows.append(Change("metadata keys", changes["keys_before"], changes["keys_after"], True))
        skip |= {"keys_before", "keys_after"}
    for name, value in changes.items():
        if name in skip:
            continue
        if isinstance(value, dict) and set(value) == {"from", "to"}:
            rows.append(Change(name, value["from"], value["to"], True))
        elif (
            event.action == AuditEvent.Action.UPDATE
            and isinstance(value, list)
            and len(value) == 2
            and name not in LIST_VALUES
        ):
            rows.append(Change(name, value[0], value[1], True))
        else:
            rows.append(Change(name, None, value, False))
    return rows


def change_text(value, limit: int | None = CHANGE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


@dataclass(frozen=True)
class AuditEntity:
    tab: str  # the browser tab its page is under ("facts"), or "" when it has no page
    pk: str  # the row whose page opens (a thread's, for its checkpoints)
    label: str


def _uuids(values) -> list[str]:
    out = []
    for value in values:
        try:
            out.append(str(uuid.UUID(str(value))))
        except ValueError:
            continue
    return out


def audit_entities(*, principal: Principal, events) -> dict:
    """{(entity_type, entity_id): AuditEntity} for the events' entities that still exist in the
    principal's workspace: one query per entity type on the page."""
    from checkpoints.models import Checkpoint
    from episodes.models import Episode
    from episodic.models import EpisodicEntry
    from facts.models import Fact
    from identities.models import MemoryUser
    from procedures.models import Procedure
    from store.models import StoreItem
    from threads.models import Thread
    from webhooks.models import WebhookSubscription

    workspace = principal.workspace
    sources = {
        "fact": ("facts", Fact, ("key",)),
        "episodic_entry": ("entries", EpisodicEntry, ("content",)),
        "episode": ("episodes", Episode, ("trigger_type",)),
        "procedure": ("procedures", Procedure, ("name",)),
        "memory_user": ("users", MemoryUser, ("display_name", "canonical_id")),
        "thread": ("threads", Thread, ("title",)),
        "thread_node_messages": ("threads", Thread, ("title",)),
        "thread_checkpoints": ("threads", Thread, ("title",)),
        "checkpoint": ("checkpoints", Checkpoint, ("checkpoint_id",)),
        "store_item": ("store", StoreItem, ("key",)),
    }
    if principal.can_admin:
        sources["webhook_subscription"] = ("webhooks", WebhookSubscription, ("url",))
    wanted: dict = {}
    for event in events:
        if event.entity_type in sources:
            wanted.setdefault(event.entity_type, set()).add(event.entity_id)
    found = {}
    by_model: dict = {}
    for entity_type, ids in wanted.items():
        by_model.setdefault(sources[entity_type][1:], set()).update(_uuids(ids))
    rows: dict = {}
    for (model, label_field), ids in by_model.items():
        if not ids:
            continue
        for pk, *labels in model.objects.filter(workspace=workspace, pk__in=ids).values_list(
            "pk", *label_field
        ):
            rows[(model, str(pk))] = next((str(label) for label in labels if label), "")
    for entity_type, ids in wanted.items():
        tab, model, _ = sources[entity_type]
        for entity_id in ids:
            label = rows.get((model, entity_id))
            if label is not None:
                found[(entity_type, entity_id)] = AuditEntity(tab, entity_id, label[:80] or "untitled")
    return found
