"""Reads of the person page (/memories/<ws>/users/<id>/): everything stored about one memory
user across the tiers, one queryset per section, and what erasing them would delete.

Each section's queryset is built on its tier's scoped selector (so an operator sees exactly
what that tier's tab shows) and filtered to the person with the tier's own indexes in mind:
facts (workspace, memory_user, -valid_from) of current versions, episodes
(workspace, memory_user, -started_at), entries, threads and identities through their
memory_user foreign-key index. The browser view pages them by primary key first.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Max,
    OuterRef,
    Q,
    Subquery,
    UUIDField,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce

from core.access import Principal, scope_to_principal
from core.errors import NotFoundError
from core.holdings import holdings_count
from core.models import AuditEvent
from episodes.selectors import episode_list
from episodic.selectors import entry_list
from facts.models import Fact
from facts.selectors import fact_list
from identities.models import ChannelIdentity, MemoryUser
from identities.selectors import (
    MEMORY_USER_NOT_FOUND,
    memory_user_legal_holds,
    memory_user_merged_ids,
    memory_user_scope,
    memory_user_survivor_ids,
)
from procedures.models import ProcedureRun
from procedures.selectors import procedure_scope
from threads.selectors import thread_scoped_queryset

# Above this many rows of one tier, the person's audit trail is read by walking the trail
# instead of probing it with their ids (see person_audit).
AUDIT_ID_LIST = 2000
# Above this many runs, the procedures the person used are found by probing each procedure
# (see person_procedures).
PROCEDURE_RUN_LIST = 2000
# Up to this many full-text matches, a section's search is read by their ids (see
# person_entries).
TEXT_MATCH_LIST = 2000
# Stands in for NULL so two NULL owners compare equal (fact_history's exact scope reference).
_NO_OWNER = uuid.UUID(int=0)


@dataclass(frozen=True)
class PersonSection:
    """One section's rows: `rows` is the queryset, `order` its stable ordering (the primary
    key breaks ties last, added by the pager), `extend` adds to a loaded page in place."""

    key: str
    rows: object
    order: tuple[str, ...]
    extend: Callable[[list], None] | None = None


def _text(value) -> str:
    return (value or "").strip()


def person_get(*, principal: Principal, memory_user_id) -> MemoryUser:
    """The person, without identities.selectors.memory_user_get's per-user statistics: the
    page's sections count each tier (counting a heavy person's 90,000 messages costs more
    than the page)."""
    memory_user = memory_user_scope(principal).select_related("merged_into").filter(pk=memory_user_id).first()
    if memory_user is None:
        raise NotFoundError(MEMORY_USER_NOT_FOUND)
    return memory_user


def person_identities(*, memory_user: MemoryUser, q: str = ""):
    rows = ChannelIdentity.objects.filter(workspace_id=memory_user.workspace_id, memory_user=memory_user)
    if q := _text(q):
        rows = rows.filter(Q(channel__icontains=q) | Q(external_id__icontains=q))
    return PersonSection("identities", rows, ("channel", "external_id"))


def person_facts(*, principal: Principal, memory_user: MemoryUser, q: str = "", history: bool = False):
    """The person's facts (user scope, and session facts they are named on) with the tier's
    effective confidence, each annotated with `versions`: how many versions its key has in
    the same scope reference (the fact page shows them). `history=True` lists superseded
    versions too."""
    filters = {"memory_user": str(memory_user.pk), "current": "all" if history else "true"}
    if q := _text(q):
        filters["q"] = q

    def owner(field, outer=False):
        value = OuterRef(field) if outer else F(field)
        return Coalesce(value, Value(_NO_OWNER), output_field=UUIDField())

    # Through facts_key_history (workspace, key, -valid_from): a few rows per key.
    versions = (
        Fact.objects.filter(
            workspace_id=OuterRef("workspace_id"),
            key=OuterRef("key"),
            scope=OuterRef("scope"),
            memory_user_id=OuterRef("memory_user_id"),
        )
        .alias(agent_ref=owner("agent_id"), thread_ref=owner("thread_id"))
        .filter(agent_ref=owner("agent_id", True), thread_ref=owner("thread_id", True))
        .order_by()
        .values("key")
        .annotate(n=Count("pk"))
        .values("n")
    )
    rows = fact_list(principal=principal, filters=filters).annotate(
        versions=Coalesce(Subquery(versions, output_field=IntegerField()), Value(1))
    )
    return PersonSection("facts", rows, ("-valid_from",))


def person_entries(*, principal: Principal, memory_user: MemoryUser, q: str = ""):
    """Episodic entries about the person, superseded ones included (the page shows status).

    A search reads the matches first, unordered and capped at TEXT_MATCH_LIST, through the
    full-text index: up to the cap the page is those rows by primary key. The planner cannot
    tell a rare word from a common one and walked the person's newest-first index through
    every entry looking for a page of matches (~76 ms of 99,000 rows for a word in none);
    above the cap matches are common, and that walk finds a page at once.
    """
    filters = {"memory_user": str(memory_user.pk), "include_superseded": "true"}
    rows = entry_list(principal=principal, filters=filters)
    if q := _text(q):
        matches = entry_list(principal=principal, filters={**filters, "q": q})
        ids = list(matches.order_by().values_list("pk", flat=True)[: TEXT_MATCH_LIST + 1])
        rows = rows.filter(pk__in=ids) if len(ids) <= TEXT_MATCH_LIST else matches
    return PersonSection("entries", rows, ("-created_at",))


def person_episodes(*, principal: Principal, memory_user: MemoryUser, q: str = ""):
    filters = {"memory_user": str(memory_user.pk)}
    if q := _text(q):
        filters["q"] = q
    return PersonSection("episodes", episode_list(principal=principal, filters=filters), ("-started_at",))


def person_threads(*, principal: Principal, memory_user: MemoryUser, q: str = ""):
    # Not threads.selectors.thread_list's memory_user filter: that one also matches users
    # merged into the person through a join, which defeats the memory_user index; a merge
    # moves their threads here anyway.
    rows = thread_scoped_queryset(principal=principal).filter(memory_user=memory_user)
    rows = rows.select_related("agent")
    if q := _text(q):
        rows = rows.filter(title__icontains=q)
    return PersonSection("threads", rows, ("-last_activity_at",))


def person_procedures(*, principal: Principal, memory_user: MemoryUser, merged_ids: list, q: str = ""):
    """Procedures the person's episodes ran (ProcedureRun rows: episodes that named the
    procedure they followed or matched a learned procedure's trigger), each annotated with
    the person's `person_runs`, `person_successes` and `person_last_run`.

    A run carries its episode's person (procedures_run_by_person: memory_user, procedure),
    and runs of `merged_ids` (person_merged_ids) count too: a run written while a merge
    moved its episode still names the merged user. Two plans, picked by a capped count of the
    person's runs: up to PROCEDURE_RUN_LIST, the procedures are those of their runs (a
    hashed handful); above it each procedure is probed for one run of the person's, one
    index descent that stops the page's scan as soon as it is full (hashing ~90,000 runs of a
    heavy person costs more than the page).
    """
    runs = ProcedureRun.objects.filter(memory_user_id__in=merged_ids)
    rows = procedure_scope(principal)
    if len(runs.order_by().values_list("pk", flat=True)[: PROCEDURE_RUN_LIST + 1]) <= PROCEDURE_RUN_LIST:
        rows = rows.filter(pk__in=runs.order_by().values("procedure_id"))
    else:
        # A scalar subquery, evaluated per procedure; an EXISTS would become a hashed
        # semi-join over every run of the person.
        one_run = runs.filter(procedure=OuterRef("pk")).order_by().values("procedure_id")[:1]
        rows = rows.alias(one_run=Subquery(one_run)).filter(one_run__isnull=False)
    rows = rows.select_related("agent")
    if q := _text(q):
        rows = rows.filter(Q(name__icontains=q) | Q(description__icontains=q))

    def extend(page: list) -> None:
        # One grouped query for the page over procedures_run_by_person, not three
        # correlated subqueries per row.
        stats = {
            row["procedure_id"]: row
            for row in runs.filter(procedure_id__in=[procedure.pk for procedure in page])
            .order_by()
            .values("procedure_id")
            .annotate(n=Count("pk"), ok=Count("pk", filter=Q(success=True)), last=Max("counted_at"))
        }
        for procedure in page:
            row = stats.get(procedure.pk, {})
            procedure.person_runs = row.get("n", 0)
            procedure.person_successes = row.get("ok", 0)
            procedure.person_last_run = row.get("last")

    return PersonSection("procedures", rows, ("name", "-version"), extend)


def person_merged_ids(*, memory_user: MemoryUser) -> list:
    """The person and every user merged into them (merges keep chains one hop deep; a deeper
    chain from older data is followed too): identities.selectors.memory_user_merged_ids."""
    return memory_user_merged_ids(memory_user=memory_user)


def people_survivors(*, people) -> None:
    """Set `survivor` on each merged record of `people`: the person at the end of its chain of
    merges (older data may hold A into B into C). One query for the chains and one for the
    survivors, none when no record of `people` was merged."""
    merged = [person for person in people if person.merged_into_id]
    if not merged:
        return
    survivors = memory_user_survivor_ids(ids=[person.pk for person in merged])
    found = {person.pk: person for person in MemoryUser.objects.filter(pk__in=set(survivors.values()))}
    for person in merged:
        # A record deleted meanwhile: its one-hop target (select_related by the list).
        person.survivor = found.get(survivors.get(person.pk)) or person.merged_into


def person_legal_holds(*, memory_user: MemoryUser) -> list[MemoryUser]:
    """identities.selectors.memory_user_legal_holds (own first, then records merged into the
    person), each record with its name loaded: one more query, and only for merged ones."""
    holds = memory_user_legal_holds(memory_user=memory_user)
    merged = [hold.pk for hold in holds if hold.pk != memory_user.pk]
    names = {}
    if merged:
        rows = MemoryUser.objects.filter(pk__in=merged).values_list("pk", "display_name", "canonical_id")
        names = {pk: (display_name, canonical_id) for pk, display_name, canonical_id in rows}
    for hold in holds:
        if hold.pk == memory_user.pk:
            hold.display_name, hold.canonical_id = memory_user.display_name, memory_user.canonical_id
        else:
            hold.display_name, hold.canonical_id = names.get(hold.pk, ("", str(hold.pk)))
    return holds


def erase_refusal_people(*, principal: Principal, refusal) -> list[MemoryUser]:
    """The people whose pages resolve an erasure's refusal (an ApplicationError of
    identities.services): for `merged`, the survivors the records were merged into; for
    `legal_hold`, the held records' survivors, whose pages list and release every hold that
    covers them. In the principal's workspace only, in the order the refusal names them."""
    key = {"merged": "merged_into", "legal_hold": "ids"}.get(getattr(refusal, "code", ""))
    named = []
    for value in (getattr(refusal, "fields", None) or {}).get(key, []) if key else []:
        try:
            named.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    if not named:
        return []
    # Scoped first: a foreign id in a refusal is not followed, let alone linked.
    in_scope = set(memory_user_scope(principal).filter(pk__in=named).values_list("pk", flat=True))
    # The end of each record's chain of merges (older data may hold A into B into C).
    survivors = memory_user_survivor_ids(ids=in_scope)
    found = {person.pk: person for person in MemoryUser.objects.filter(pk__in=set(survivors.values()))}
    people = {}
    for pk in named:
        survivor = found.get(survivors.get(pk))
        if survivor is not None:
            people.setdefault(survivor.pk, survivor)
    return list(people.values())


def person_merges(*, memory_user: MemoryUser, q: str = ""):
    """Users merged into the person (their identities and rows moved here)."""
    rows = MemoryUser.objects.filter(workspace_id=memory_user.workspace_id, merged_into=memory_user)
    if q := _text(q):
        rows = rows.filter(Q(canonical_id__icontains=q) | Q(display_name__icontains=q))
    return PersonSection("merges", rows, ("-updated_at",))


def person_audit(*, principal: Principal, memory_user: MemoryUser, merged_ids: list, q: str = ""):
    """The audit trail about the person: events on the person and the users merged into
    them, and on their facts, episodic entries, episodes and threads that still exist.

    Two plans, picked by how many rows the person has. Up to AUDIT_ID_LIST rows per tier,
    their ids are read first and matched on core_audit_entity (workspace, entity_type,
    entity_id): a few index probes, whatever the size of the workspace's trail. Above it the
    query walks core_audit_recent newest first and checks each event's row by primary key,
    which stops after a page because most of the trail is the person's. (A hashed subplan
    of a large person's ids costs ~20 ms per tier to build; walking the whole trail for a
    person with few events costs a scan of every event.) The rows are the tier's whatever
    their workspace: the event itself is scoped to the workspace. Deleted rows no longer name their
    person, so their DELETE events show only in the workspace audit; the erasure of the
    person keeps its ERASE events.
    """
    from episodes.models import Episode
    from episodic.models import EpisodicEntry
    from threads.models import Thread

    tiers = {"fact": Fact, "episodic_entry": EpisodicEntry, "episode": Episode, "thread": Thread}
    owned = {"workspace_id": memory_user.workspace_id, "memory_user": memory_user}
    id_lists = {}
    for entity_type, model in tiers.items():
        ids = model.objects.filter(**owned).order_by().values_list("pk", flat=True)
        ids = list(ids[: AUDIT_ID_LIST + 1])
        if len(ids) > AUDIT_ID_LIST:
            id_lists = None
            break
        id_lists[entity_type] = [str(pk) for pk in ids]
    rows = scope_to_principal(AuditEvent.objects.all(), principal, agent_field=None)
    about = Q(entity_type="memory_user", entity_id__in=[str(pk) for pk in merged_ids])
    if id_lists is not None:
        for entity_type, ids in id_lists.items():
            if ids:
                about |= Q(entity_type=entity_type, entity_id__in=ids)
        rows = rows.filter(about)
    else:
        # Each event's row is looked up by primary key through a scalar subquery: an EXISTS
        # here is turned into a hashed subplan of every row of the person (~20 ms per
        # 10,000). CASE, not AND, guards the cast: PostgreSQL may evaluate AND's operands in
        # any order, and an entity_id of another type need not be a UUID.
        row_id = Cast(OuterRef("entity_id"), UUIDField())
        owners = [
            When(
                entity_type=entity_type,
                then=Subquery(model.objects.filter(pk=row_id).values("memory_user_id")[:1]),
            )
            for entity_type, model in tiers.items()
        ]
        owner = Case(*owners, default=Value(None), output_field=UUIDField())
        rows = rows.alias(row_owner=owner).filter(about | Q(row_owner=memory_user.pk))
    if q := _text(q):
        rows = rows.filter(Q(action__iexact=q) | Q(entity_type__icontains=q) | Q(actor__icontains=q))
    return PersonSection("audit", rows, ("-at", "-id"))


def person_erase_preview(*, memory_user: MemoryUser) -> dict:
    """What identities.services.memory_user_erase would delete, counted without deleting:
    the person and the users merged into them, their channel identities, and every tier's
    holding (core.holdings). Same keys as the counts the erasure returns."""
    ids = person_merged_ids(memory_user=memory_user)
    return {
        "memory_users": len(ids),
        "identities": ChannelIdentity.objects.filter(memory_user__in=ids).count(),
        **holdings_count(memory_user_ids=ids),
    }
