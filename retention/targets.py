"""What each tier's retention rule selects: its rows' age column, the group "keep the newest N"
counts within, how a row reaches its agent and its person (for legal holds), and what must
happen before rows go.

Messages are special: a thread is a tree whose window walks parent links, and a summary
holds one branch up to its last message. Only messages a summary holds alone may go
(`SummarizedMessage`: above the summary's last message, on its branch, and on no other
branch, which would still read them), and their children are detached first. A message no
summary holds yet waits for the next compaction (retention asks for one).
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection
from django.db.models import BooleanField, Exists, Expression, ExpressionWrapper, OuterRef, Q

from checkpoints.models import Checkpoint
from episodes.models import Episode
from episodic.models import EpisodicEntry
from facts.models import Fact
from facts.services import facts_rows_delete
from identities.models import MemoryUser
from retention.models import Tier
from threads.models import Message, RunSnapshot, SummarizedMessage, Thread


def _messages_summarized() -> Q:
    """Messages a summary of their scope (the thread's, or their node's) holds alone.

    Rows the compaction keeps (threads.services.compaction), not a depth comparison: the
    messages of another branch at the summary's depths are not among them, and a scan of a
    workspace's messages tests one primary-key lookup a row.
    """
    return Q(Exists(SummarizedMessage.objects.filter(message_id=OuterRef("pk"))))


# KEY SHARE conflicts only with FOR UPDATE, which every writer of a thread's marks takes first
# (appends, compactions, thread deletion). SKIP LOCKED: a batch never waits for them.
_THREADS_LOCK_SQL = """
SELECT t.id FROM threads_thread t
WHERE t.id IN (SELECT m.thread_id FROM threads_message m WHERE m.id = ANY(%s))
FOR KEY SHARE OF t SKIP LOCKED
"""


def _messages_threads_locked(ids: list) -> Q:
    """Lock the threads of the messages `ids` that nothing writes now; the messages of those
    threads only.

    An append that forks from a held message clears its marks, inserts a child whose parent
    constraint is checked at commit, and holds the thread row throughout. Deleting that parent
    meanwhile deadlocked (each waits for the other's rows), or, the batch first, failed the
    append at commit. With the thread held, an append in progress keeps the batch off its
    thread, and an append after waits, then sees the parent gone: a 400, not a lost turn.
    """
    with connection.cursor() as cursor:
        cursor.execute(_THREADS_LOCK_SQL, [list(ids)])
        threads = [row[0] for row in cursor.fetchall()]
    return Q(thread_id__in=threads)


# KEY SHARE conflicts only with FOR UPDATE, which every write that locks a person takes
# (identities.services.memory_users_lock: erasure, merge, legal holds). SKIP LOCKED: a batch
# never waits for one. A person held (legal hold) since the batch's rows were chosen is left out.
_PEOPLE_LOCK_SQL = """
SELECT u.id FROM {table} u
WHERE u.id = ANY(%s::uuid[]) AND u.legal_hold_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM {table} m WHERE m.merged_into_id = u.id AND m.legal_hold_at IS NOT NULL)
ORDER BY u.id
FOR KEY SHARE OF u SKIP LOCKED
"""


def _owned_by(model, owner: str, people: list) -> Q:
    """Rows whose person through `owner` (a field, or one relation and its field) is none or
    one of `people`. A relation is followed in a subquery: the batch's FOR UPDATE locks the
    tables of its FROM list, and a join would lock the related rows (threads) too."""
    if "__" not in owner:
        return Q(**{f"{owner}__isnull": True}) | Q(**{f"{owner}__in": people})
    relation, field = owner.split("__", 1)
    related = model._meta.get_field(relation).related_model.objects.filter(
        Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__in": people})
    )
    return Q(**{f"{relation}__isnull": True}) | Q(**{f"{relation}__in": related.values("pk")})


def _people_locked(model, owners: tuple[str, ...]) -> Callable[[list], Q]:
    """An `owner_lock`: lock the people the rows `ids` of `model` belong to (through each of
    `owners`) that nothing erases, merges or holds now; the rows of those people only, and
    rows that belong to nobody.

    Every batch takes it first. An erasure or a merge locks the person first, then their rows.
    A batch that locked the rows first and then waited for rows the erasure or merge had
    reached meanwhile (the preferences a facts batch rebuilds; the vectors of entries, the
    writes of checkpoints, the facts citing episodes, which an erasure deletes or clears before
    it waits for the rows the batch holds) closed a cycle with it. With the person held here,
    an erasure or merge in progress keeps the batch off that person's rows, and one that
    starts after waits for the batch. The person is read again here too: a row a merge moved
    since it was chosen, to a person under a legal hold, stays.
    """

    def lock(ids: list) -> Q:
        rows = model.objects.filter(pk__in=ids)
        people = set()
        for owner in owners:
            people |= set(rows.exclude(**{owner: None}).values_list(owner, flat=True).distinct())
        locked = []
        if people:
            table = connection.ops.quote_name(MemoryUser._meta.db_table)
            with connection.cursor() as cursor:
                cursor.execute(_PEOPLE_LOCK_SQL.format(table=table), [sorted(str(pk) for pk in people)])
                locked = [row[0] for row in cursor.fetchall()]
        allowed = Q()
        for owner in owners:
            allowed &= _owned_by(model, owner, locked)
        return allowed

    return lock


def _dependants_held(ids: list, *, model, field: str) -> set:
    """The rows of `ids` (locked by the batch) that a row of `model` outside them points at
    through `field` while another transaction holds that row.

    Deleting a row updates or deletes what points at it (a child detached, a fact's source
    cleared by SET_NULL). That UPDATE waiting for a row another transaction holds, while this
    batch holds a row that transaction waits for, was a deadlock: a fact write holds the
    version it closes and, at commit, checks the message its new version cites; an erasure
    clears the facts citing a person's episodes, then deletes the episodes. Locked here in pk
    order, SKIP LOCKED, the batch never waits for one; a row with a dependant held elsewhere
    stays for a later batch, and the dependants of the rows that go are all held here.
    """
    outside = model.objects.filter(**{f"{field}__in": ids})
    if "__" not in field and model._meta.get_field(field).related_model is model:
        outside = outside.exclude(pk__in=ids)
    parents = dict(outside.values_list("pk", field))
    # OF self: a `field` through a relation joins rows the batch must not lock (messages).
    locked = outside.order_by("pk").select_for_update(no_key=True, skip_locked=True, of=("self",))
    locked = set(locked.values_list("pk", flat=True))
    return {parent for child, parent in parents.items() if child not in locked}


def _dependants_locked(*dependants: tuple[type, str]) -> Callable[[list], list]:
    """A `before_delete`: the rows of `ids` whose every dependant (rows of each `(model,
    field)` pointing at them) the batch could lock (`_dependants_held`)."""

    def before_delete(ids: list) -> list:
        blocked = set()
        for model, field in dependants:
            blocked |= _dependants_held(ids, model=model, field=field)
        return [pk for pk in ids if pk not in blocked]

    return before_delete


# What deleting a thread, a message or an episode deletes or clears besides the rows under it:
# the facts, episodes and entries of a thread or citing it; the facts citing a message or an
# episode; a message's children, which are detached.
_threads_dependants = _dependants_locked(
    (Fact, "thread"), (Fact, "source_message__thread"), (Episode, "thread"), (EpisodicEntry, "source_thread")
)
_messages_dependants = _dependants_locked((Message, "parent"), (Fact, "source_message"))
_episodes_dependants = _dependants_locked((Fact, "source_episode"))
# An entry superseded by or merged into one of the batch's, which the collector unlinks (a purge
# by source holding it waits for an entry of the batch).
_entries_detach = _dependants_locked((EpisodicEntry, "superseded_by"))


def _messages_detach(ids: list) -> list:
    """Detach the children of the messages `ids` (locked by the batch) that are not among
    them; returns the messages that may go: those whose every child and every fact citing
    them the batch could lock (`_dependants_held`). A child held elsewhere is the vector job's
    or a second engine's."""
    ids = _messages_dependants(ids)
    # The parent constraint is deferred: children of deleted messages become roots of what
    # is left, and the window's walk stops there. A message kept back above is among these
    # when its own parent goes (the batch holds it already).
    Message.objects.filter(parent_id__in=ids).exclude(pk__in=ids).update(parent=None)
    return ids


def _locks_all(*locks: Callable[[list], Q]) -> Callable[[list], Q]:
    """An `owner_lock` taking each of `locks` in turn (people before threads, as an erasure
    locks them); the rows every one of them allows."""

    def lock(ids: list) -> Q:
        allowed = Q()
        for each in locks:
            allowed &= each(ids)
        return allowed

    return lock


# Current versions and closed ones (history, and facts held in review) are ranked apart: a
# key updated often would otherwise push the current value of every other key out of "the
# newest N" with versions that are no longer true.
_FACT_IS_CURRENT = ExpressionWrapper(Q(valid_to__isnull=True), output_field=BooleanField())


@dataclass(frozen=True)
class Target:
    tier: str
    model: type
    age_field: str
    # Field names or expressions: "keep the newest N" counts within each of their groups.
    group: tuple[str | Expression, ...]
    newest_first: tuple[str, ...]
    agent: str
    person: str | None
    # Rows audited one event each (curated memory the webhooks and the audit page follow);
    # the others are audited as one event with the count per batch.
    audit_entity: str = ""
    eligible: Callable[[], Q] | None = None
    # Locks what the rows hang from, before the rows, in the batch's transaction: the rows
    # whose owner it locked (the others wait for a later batch).
    owner_lock: Callable[[list], Q] | None = None
    # Runs on the locked rows `ids` before they go; returns those that may go (the others stay
    # for a later batch).
    before_delete: Callable[[list], list] | None = None
    # Deletes the rows `ids` (locked by the caller); a plain queryset delete when None.
    delete: Callable[[list], None] | None = None


TARGETS = {
    Tier.THREADS: Target(
        tier=Tier.THREADS,
        model=Thread,
        age_field="last_activity_at",
        group=("agent_id", "memory_user_id"),
        newest_first=("-last_activity_at", "-id"),
        agent="agent_id",
        person="memory_user",
        audit_entity="thread",
        owner_lock=_people_locked(Thread, ("memory_user",)),
        before_delete=_threads_dependants,
    ),
    Tier.MESSAGES: Target(
        tier=Tier.MESSAGES,
        model=Message,
        age_field="created_at",
        group=("thread_id",),
        newest_first=("-seq",),
        agent="thread__agent_id",
        person="thread__memory_user",
        eligible=_messages_summarized,
        owner_lock=_locks_all(_people_locked(Message, ("thread__memory_user",)), _messages_threads_locked),
        before_delete=_messages_detach,
    ),
    Tier.CHECKPOINTS: Target(
        tier=Tier.CHECKPOINTS,
        model=Checkpoint,
        age_field="created_at",
        group=("thread_id", "checkpoint_ns"),
        newest_first=("-checkpoint_id",),
        agent="thread__agent_id",
        person="thread__memory_user",
        owner_lock=_people_locked(Checkpoint, ("thread__memory_user",)),
    ),
    Tier.RUN_SNAPSHOTS: Target(
        tier=Tier.RUN_SNAPSHOTS,
        model=RunSnapshot,
        age_field="updated_at",
        group=("thread_id",),
        newest_first=("-updated_at", "-id"),
        agent="thread__agent_id",
        person="thread__memory_user",
        owner_lock=_people_locked(RunSnapshot, ("thread__memory_user",)),
    ),
    Tier.EPISODIC_ENTRIES: Target(
        tier=Tier.EPISODIC_ENTRIES,
        model=EpisodicEntry,
        age_field="created_at",
        group=("agent_id", "memory_user_id"),
        newest_first=("-created_at", "-id"),
        agent="agent_id",
        person="memory_user",
        audit_entity="episodic_entry",
        owner_lock=_people_locked(EpisodicEntry, ("memory_user",)),
        before_delete=_entries_detach,
    ),
    Tier.EPISODES: Target(
        tier=Tier.EPISODES,
        model=Episode,
        age_field="created_at",
        group=("agent_id", "memory_user_id"),
        newest_first=("-created_at", "-id"),
        agent="agent_id",
        person="memory_user",
        audit_entity="episode",
        owner_lock=_people_locked(Episode, ("memory_user",)),
        before_delete=_episodes_dependants,
    ),
    Tier.FACTS: Target(
        tier=Tier.FACTS,
        model=Fact,
        age_field="updated_at",
        group=("agent_id", "memory_user_id", _FACT_IS_CURRENT),
        newest_first=("-updated_at", "-id"),
        agent="agent_id",
        person="memory_user",
        audit_entity="fact",
        # A session fact belongs to its thread's person too (facts' holding, core.holdings).
        owner_lock=_people_locked(Fact, ("memory_user", "thread__memory_user")),
        # A person's preferences mirror their user_preference facts: rebuilt after.
        delete=lambda ids: facts_rows_delete(ids=ids),
    ),
}
