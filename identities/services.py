"""Writes of memory users: identify, update, merge and erase (the right to erasure)."""

import hashlib
import re
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Min, QuerySet
from django.utils import timezone

from core.access import Principal, references_resolve, require_workspace_key
from core.errors import ApplicationError, ConflictError, NotFoundError
from core.holdings import holdings_count, holdings_erase, holdings_merge
from core.models import AuditEvent
from core.services import audit_record
from identities.models import ChannelIdentity, MemoryUser
from identities.selectors import (
    MEMORY_USER_NOT_FOUND,
    MERGE_CHAIN_LIMIT,
    memory_user_merge_chain,
    memory_user_survivor_ids,
)

CHANNEL_INVALID = (
    "A channel is 1-50 lowercase letters, digits, '_', '-' or '.' (telegram, email, slack, web)."
)
EXTERNAL_ID_REQUIRED = "An external id is required (1-255 characters)."
PROFILE_NOT_OBJECT = "A profile must be a JSON object."
CANONICAL_ID_REQUIRED = "A canonical id is required (1-255 characters)."
CANONICAL_ID_TAKEN = "Another memory user of this workspace has this canonical id."
IDENTITY_TAKEN = "This channel identity belongs to another memory user."
MERGE_INTO_SELF = "A memory user cannot be merged into itself."
MERGE_INTO_MERGED = "The target was itself merged into another user; merge into that one instead."
MERGE_SOURCE_MERGED_ELSEWHERE = "The source was already merged into another user."
MERGE_TARGET_MERGED_MEANWHILE = (
    "The target was merged into another user while this merge ran; merge into that one "
    "(`merged_into`) instead."
)
MERGE_SOURCE_MERGED_MEANWHILE = "The source was merged into another user while this merge ran."
MEMORY_USERS_CHANGED = "A memory user of this request was merged or erased while it ran; retry shortly."
MERGE_ACROSS_WORKSPACES = "Both memory users must belong to the same workspace."
MEMORY_USERS_NOT_FOUND = "Some of these memory users do not exist."
LEGAL_HOLD_REASON_REQUIRED = "A legal hold needs a reason (1-500 characters)."
UNDER_LEGAL_HOLD = "This person is under a legal hold: release the hold before erasing them."
MERGED_RECORD_ERASE = (
    "This memory user was merged into another, which now holds all of their data: erase that "
    "person (`merged_into`) instead, which erases this record too."
)
LEGAL_HOLD_NOT_FOUND = "No legal hold of this person was placed on that memory user."

# Rounds of a write whose people changed between reading and locking them; each round that
# fails saw a merge or erasure commit meanwhile, so three in a row means a busy record.
LOCK_ATTEMPTS = 3

_CHANNEL = re.compile(r"^[a-z0-9_.\-]{1,50}$")
# Profile keys that name the person, in order of preference, used for display_name.
_NAME_KEYS = ("display_name", "name", "full_name", "username")


@dataclass(frozen=True)
class IdentifyResult:
    memory_user: MemoryUser
    created: bool
    identity: ChannelIdentity


@dataclass(frozen=True)
class MergeResult:
    target: MemoryUser
    counts: dict
    already_merged: bool = False


def _invalid(field: str, message: str) -> ApplicationError:
    return ApplicationError(message, fields={field: [message]})


def _channel_validate(channel, external_id) -> tuple[str, str]:
    channel = (channel or "").strip().lower() if isinstance(channel, str) else ""
    if not _CHANNEL.match(channel):
        raise _invalid("channel", CHANNEL_INVALID)
    external_id = str(external_id).strip() if external_id is not None else ""
    if not external_id or len(external_id) > 255:
        raise _invalid("external_id", EXTERNAL_ID_REQUIRED)
    return channel, external_id


def _canonical_id_for(channel: str, external_id: str) -> str:
    """`<channel>:<external_id>`; when that is longer than the column (a 50-character channel
    and a 255-character external id are 306), its head and a digest of the whole, so it still
    fits and still names one identity."""
    canonical_id = f"{channel}:{external_id}"
    max_length = MemoryUser._meta.get_field("canonical_id").max_length
    if len(canonical_id) <= max_length:
        return canonical_id
    digest = hashlib.sha256(canonical_id.encode()).hexdigest()[:32]
    return f"{canonical_id[: max_length - len(digest) - 1]}~{digest}"


def _profile_name(profile: dict) -> str:
    for name in _NAME_KEYS:
        value = profile.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return ""


class MemoryUsersChanged(ConflictError):
    """The people a write locked were merged or erased between its reading and its locking
    them; `locked_retrying` runs the write again, and past LOCK_ATTEMPTS it is a 409."""

    def __init__(self):
        super().__init__(MEMORY_USERS_CHANGED, code="changed")


# The records a lock covers: the records named (`base`, a list or a subquery of ids), with
# `survivors` the records each was merged into along its chain, and with `merged` every record
# merged into any of those, directly or along a chain. Bounded and cycle-safe as the chains of
# identities.selectors.
_LOCK_CLOSURE = """
    WITH RECURSIVE up (id, merged_into_id, depth, path) AS (
        SELECT id, merged_into_id, 0, ARRAY[id] FROM {table} WHERE id IN ({base})
        UNION ALL
        SELECT u.id, u.merged_into_id, up.depth + 1, up.path || u.id
        FROM up JOIN {table} u ON u.id = up.merged_into_id
        WHERE %s AND up.depth < %s AND NOT u.id = ANY(up.path)
    ), down (id, depth, path) AS (
        SELECT DISTINCT id, 0, ARRAY[id] FROM up
        UNION ALL
        SELECT d.id, down.depth + 1, down.path || d.id
        FROM down JOIN {table} d ON d.merged_into_id = down.id
        WHERE %s AND down.depth < %s AND NOT d.id = ANY(down.path)
    )
"""


def _memory_users_locked(*, ids, survivors: bool, merged: bool) -> dict:
    """{pk: MemoryUser} of the closure of `ids` (see _LOCK_CLOSURE), locked FOR UPDATE in one
    statement in key order. Every write's lock of memory-user rows goes through here (and
    memory_users_hold's KEY SHARE takes the same order, _HOLD_SQL): writes that lock rows in
    one order, all in one statement, cannot deadlock on them."""
    table = connection.ops.quote_name(MemoryUser._meta.db_table)
    if isinstance(ids, QuerySet):
        base, params = ids.query.sql_with_params()
        params = list(params)
    else:
        base, params = "SELECT unnest(%s::uuid[])", [[str(pk) for pk in ids if pk is not None]]
    closure = _LOCK_CLOSURE.format(table=table, base=base)
    params += [survivors, MERGE_CHAIN_LIMIT, merged, MERGE_CHAIN_LIMIT]
    # Locked from the latest committed version (a row a merge updated while this waited is
    # read as the merge left it), in key order: the sort runs below the locking step.
    sql = (
        closure + f"SELECT * FROM {table} WHERE id IN (SELECT id FROM down) ORDER BY id FOR UPDATE OF {table}"
    )
    locked = {u.pk: u for u in MemoryUser.objects.raw(sql, params)}
    if merged:
        # A record merged into a locked one by a merge that committed while this statement
        # waited is not in the closure it read; it is now, and no write can change it again.
        with connection.cursor() as cursor:
            cursor.execute(closure + "SELECT DISTINCT id FROM down", params)
            if {pk for (pk,) in cursor.fetchall()} - set(locked):
                raise MemoryUsersChanged()
    return locked


def memory_users_lock(*, ids, survivors: bool = False, merged: bool = False) -> dict:
    """Inside a transaction: {pk: MemoryUser} of the people of `ids` (a list, or a queryset of
    ids), locked FOR UPDATE in one statement in key order, with `survivors` the records each was
    merged into (along its chain) and with `merged` every record merged into any of them; an
    erased person is absent.

    Every identities write that locks more than one memory user locks them all here, before any
    other row, so no two of them can deadlock. Raises MemoryUsersChanged when a merge committed
    while the lock waited changed the set (the caller's transaction is rolled back and run
    again by `locked_retrying`)."""
    locked = _memory_users_locked(ids=ids, survivors=survivors, merged=merged)
    if survivors and not merged:
        # The chain of a record merged while the lock waited goes on past the rows locked.
        pointed_at = {person.merged_into_id for person in locked.values()}
        for pk in set(locked) - pointed_at:
            if _survivor_of(locked, pk) is None:
                raise MemoryUsersChanged()
    return locked


def _survivor_of(locked: dict, pk):
    """The end of `pk`'s chain of merges among `locked`; None when the chain leaves `locked`
    before MERGE_CHAIN_LIMIT hops (a merge committed meanwhile), where the selectors stop."""
    for _ in range(MERGE_CHAIN_LIMIT):
        into = locked[pk].merged_into_id
        if into is None:
            return pk
        if into not in locked:
            return None
        pk = into
    return pk


def locked_retrying(write):
    """`write()` in a transaction (a savepoint inside the caller's), run again from the start
    when memory_users_lock reports its people changed: rolling back gives up the rows it locked,
    so the next round locks the new set in key order too."""
    for attempt in range(LOCK_ATTEMPTS):
        try:
            with transaction.atomic():
                return write()
        except MemoryUsersChanged:
            if attempt == LOCK_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _identity_create(memory_user: MemoryUser, *, channel, external_id, profile) -> ChannelIdentity:
    """A channel identity of `memory_user` (channel and external_id already validated)."""
    return ChannelIdentity.objects.create(
        workspace_id=memory_user.workspace_id,
        memory_user=memory_user,
        channel=channel,
        external_id=external_id,
        profile=profile,
    )


def memory_user_create(
    *, workspace, canonical_id: str, display_name: str = "", identities=(), actor: str = "system"
) -> MemoryUser:
    """Create a memory user with optional channel identities ({channel, external_id, profile})."""
    canonical_id = (canonical_id or "").strip()
    if not canonical_id or len(canonical_id) > 255:
        raise _invalid("canonical_id", CANONICAL_ID_REQUIRED)
    cleaned = [
        (*_channel_validate(i.get("channel"), i.get("external_id")), i.get("profile") or {})
        for i in identities
    ]
    try:
        with transaction.atomic():
            memory_user = MemoryUser.objects.create(
                workspace=workspace, canonical_id=canonical_id, display_name=(display_name or "")[:200]
            )
            for channel, external_id, profile in cleaned:
                _identity_create(memory_user, channel=channel, external_id=external_id, profile=profile)
            audit_record(
                workspace=workspace,
                actor=actor,
                action=AuditEvent.Action.CREATE,
                entity_type="memory_user",
                entity_id=memory_user.pk,
                changes={
                    "canonical_id": canonical_id,
                    "identities": [f"{channel}:{external_id}" for channel, external_id, _ in cleaned],
                },
            )
    except IntegrityError:
        if MemoryUser.objects.filter(workspace=workspace, canonical_id=canonical_id).exists():
            raise ConflictError(CANONICAL_ID_TAKEN, fields={"canonical_id": [CANONICAL_ID_TAKEN]})
        raise ConflictError(IDENTITY_TAKEN, fields={"identities": [IDENTITY_TAKEN]})
    return memory_user


def memory_user_identify(
    *, workspace, channel: str, external_id, profile: dict | None = None, actor: str = "system"
) -> IdentifyResult:
    """Find or create the person behind (channel, external_id) and record that they were seen.

    An identity of a merged user resolves to the user it was merged into. A new person gets
    canonical_id `<channel>:<external_id>`. The profile is merged into the identity's
    profile; a name in it fills an empty display_name. Safe under concurrency: a racing
    creation is resolved by the unique constraints and retried as a lookup.
    """
    channel, external_id = _channel_validate(channel, external_id)
    if profile is not None and not isinstance(profile, dict):
        raise _invalid("profile", PROFILE_NOT_OBJECT)
    profile = profile or {}
    for attempt in range(2):
        try:
            return locked_retrying(
                lambda: _memory_user_identify(
                    workspace=workspace,
                    channel=channel,
                    external_id=external_id,
                    profile=profile,
                    actor=actor,
                )
            )
        except IntegrityError:
            # A racing identify created this identity or this canonical id first: a lookup now.
            if attempt:
                raise
    raise AssertionError("unreachable")


def _memory_user_identify(*, workspace, channel, external_id, profile, actor) -> IdentifyResult:
    identities = ChannelIdentity.objects.filter(workspace=workspace, channel=channel, external_id=external_id)
    canonical_id = _canonical_id_for(channel, external_id)
    # The person before the identity: a merge locks its people, then moves their identities.
    # Locked the other way round (the identity with its person), the two waited for each other.
    # The person of the canonical id is locked with them, for an identity not stored yet.
    people = memory_users_lock(
        ids=identities.order_by()
        .values("memory_user_id")
        .union(
            MemoryUser.objects.filter(workspace=workspace, canonical_id=canonical_id).order_by().values("pk")
        ),
        survivors=True,
    )
    identity = identities.select_for_update(of=("self",)).first()
    created = identity is None
    if created:
        existing = next((u for u in people.values() if u.canonical_id == canonical_id), None)
        if existing is not None:
            # The canonical id exists without this identity (created by the API, or its
            # identity was deleted): the same person, or the one they were merged into.
            memory_user = people[_survivor_of(people, existing.pk)]
        else:
            memory_user = MemoryUser.objects.create(
                workspace=workspace, canonical_id=canonical_id, display_name=_profile_name(profile)
            )
        identity = _identity_create(memory_user, channel=channel, external_id=external_id, profile=profile)
        audit_record(
            workspace=workspace,
            actor=actor,
            action=AuditEvent.Action.CREATE,
            entity_type="memory_user",
            entity_id=memory_user.pk,
            changes={"identify": f"{channel}:{external_id}"},
        )
    else:
        if identity.memory_user_id not in people:
            # Moved by a merge that committed between reading its person and locking them.
            raise MemoryUsersChanged()
        # An identity of a merged user resolves to the user it was merged into.
        memory_user = people[_survivor_of(people, identity.memory_user_id)]
        if profile and {**identity.profile, **profile} != identity.profile:
            identity.profile = {**identity.profile, **profile}
            identity.save(update_fields=["profile", "updated_at"])
    now = timezone.now()
    update = {"last_seen_at": now}
    name = _profile_name(profile)
    if name and not memory_user.display_name:
        update["display_name"] = name
    MemoryUser.objects.filter(pk=memory_user.pk).update(**update)
    for attr, value in update.items():
        setattr(memory_user, attr, value)
    return IdentifyResult(memory_user=memory_user, created=created, identity=identity)


def memory_user_update(
    *, memory_user: MemoryUser, actor: str, display_name: str | None = None, canonical_id: str | None = None
) -> MemoryUser:
    changes = {}
    if display_name is not None and display_name != memory_user.display_name:
        changes["display_name"] = {"from": memory_user.display_name, "to": display_name[:200]}
        memory_user.display_name = display_name[:200]
    if canonical_id is not None:
        canonical_id = canonical_id.strip()
        if not canonical_id or len(canonical_id) > 255:
            raise _invalid("canonical_id", CANONICAL_ID_REQUIRED)
        if canonical_id != memory_user.canonical_id:
            changes["canonical_id"] = {"from": memory_user.canonical_id, "to": canonical_id}
            memory_user.canonical_id = canonical_id
    if not changes:
        return memory_user
    try:
        with transaction.atomic():
            memory_user.save(update_fields=[*changes, "updated_at"])
            audit_record(
                workspace=memory_user.workspace,
                actor=actor,
                action=AuditEvent.Action.UPDATE,
                entity_type="memory_user",
                entity_id=memory_user.pk,
                changes=changes,
            )
    except IntegrityError:
        raise ConflictError(CANONICAL_ID_TAKEN, fields={"canonical_id": [CANONICAL_ID_TAKEN]})
    return memory_user


def memory_users_hold(*, ids) -> dict:
    """Inside a transaction: {id: the id of the person whose rows it names now} for the people
    of `ids`, each such person held (FOR KEY SHARE) until the transaction ends.

    A merge locks both of its people FOR UPDATE before it moves their rows, so it cannot begin
    on a held person, and one under way is waited for. A write that copies a person's id onto a
    new row (a vector, a fact) asks this first, before it locks the rows it reads: its row then
    names the person it belongs to, and any later merge moves it. Read in the wrong order, a
    merge committing meanwhile left the new row on the merged person, where nothing finds it.
    An erased person maps to itself (the write then fails on its foreign key).
    """
    current = {pk: pk for pk in ids if pk is not None}
    # Each person with the records along their chain, in one statement in key order as every
    # write of memory users locks them (memory_users_lock), so a merge cannot cross it.
    held = _memory_users_held(ids=list(current))
    asked = set(current)
    for _ in range(MERGE_CHAIN_LIMIT + 1):
        # A chain that goes on past the rows held was extended by a merge that committed while
        # the statement waited: the people merged into are held in turn.
        for pk, now in current.items():
            for _hop in range(MERGE_CHAIN_LIMIT):
                if held.get(now) is None:
                    break
                now = held[now]
            current[pk] = now
        pending = {now for now in current.values() if now not in held} - asked
        if not pending:
            break
        asked |= pending
        held.update(_memory_users_held(ids=list(pending)))
    return current


# memory_users_hold's statement: the people and the records along their chains of merges
# (bounded and cycle-safe), FOR KEY SHARE in one statement in key order, as memory_users_lock
# takes them: taken hop by hop, a hold on an older chain (A into B, later B into C) held A and B
# while a merge of C, holding C, waited for A. Only (id, merged_into_id): it runs before every
# write that copies a person's id, where memory_users_lock's whole rows and closure cost
# 0.5-0.9 ms more a call (a person never merged: about 0.5 ms against 0.36 for the statement
# before chains were followed).
_HOLD_SQL = """
    WITH RECURSIVE up (id, merged_into_id, depth, path) AS (
        SELECT id, merged_into_id, 0, ARRAY[id] FROM {table} WHERE id = ANY(%s)
        UNION ALL
        SELECT u.id, u.merged_into_id, up.depth + 1, up.path || u.id
        FROM up JOIN {table} u ON u.id = up.merged_into_id
        WHERE up.depth < %s AND NOT u.id = ANY(up.path)
    )
    SELECT id, merged_into_id FROM {table} WHERE id IN (SELECT id FROM up) ORDER BY id FOR KEY SHARE
"""


def _memory_users_held(*, ids) -> dict:
    """{id: merged_into_id} of the people `ids` and the records along their chains, held FOR
    KEY SHARE in one statement in key order."""
    table = connection.ops.quote_name(MemoryUser._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(_HOLD_SQL.format(table=table), [list(ids), MERGE_CHAIN_LIMIT])
        return dict(cursor.fetchall())


def memory_user_merge(*, source: MemoryUser, target: MemoryUser, actor: str) -> MergeResult:
    """Move everything of `source` to `target` in one transaction, and mark the source.

    Moves channel identities here and every tier's rows through core.holdings (threads,
    facts, episodes, episodic entries; facts close conflicting versions, see
    facts.services.memory_user_facts_merge). Users previously merged into the source are
    re-pointed at the target (chains stay one hop). The source keeps `merged_into` and no
    longer appears in lists; identifying with one of its identities returns the target. A
    legal hold of the source is carried to a target without one, so the moved rows stay held;
    the source keeps its own hold too, which still covers the target's rows and is listed and
    released on the target (memory_user_legal_holds, memory_user_hold_release `placed_on`).

    Idempotent: merging a source already merged into this target changes nothing.
    """
    if source.workspace_id != target.workspace_id:
        raise NotFoundError(MERGE_ACROSS_WORKSPACES, fields={"target": [MERGE_ACROSS_WORKSPACES]})
    if source.pk == target.pk:
        raise _invalid("target", MERGE_INTO_SELF)
    return locked_retrying(lambda: _memory_user_merge(source=source, target=target, actor=actor))


def _memory_user_merge(*, source: MemoryUser, target: MemoryUser, actor: str) -> MergeResult:
    # Both people with every record merged into them, in one statement in key order: the merge
    # re-points the source's merged records, and a hold release or an erasure that locks one of
    # them waits here instead of crossing it.
    locked = memory_users_lock(ids=[source.pk, target.pk], merged=True)
    if source.pk not in locked or target.pk not in locked:
        # Erased since the caller read them.
        gone = [name for name, u in (("source", source), ("target", target)) if u.pk not in locked]
        raise NotFoundError(MEMORY_USERS_NOT_FOUND, fields={name: ["Unknown id."] for name in gone})
    read_source, read_target = source, target
    source, target = locked[source.pk], locked[target.pk]
    if source.merged_into_id == target.pk:
        return MergeResult(target=target, counts={}, already_merged=True)
    for name, person, read, meanwhile, refused in (
        ("target", target, read_target, MERGE_TARGET_MERGED_MEANWHILE, MERGE_INTO_MERGED),
        ("source", source, read_source, MERGE_SOURCE_MERGED_MEANWHILE, MERGE_SOURCE_MERGED_ELSEWHERE),
    ):
        if person.merged_into_id is None:
            continue
        if read.merged_into_id is None:
            # Merged by a request that committed while this one waited: a conflict naming where
            # the record went, so the client can merge into (or from) that one.
            survivor = memory_user_survivor_ids(ids=[person.pk]).get(person.pk, person.merged_into_id)
            raise ConflictError(
                meanwhile, code="merged", fields={name: [meanwhile], "merged_into": [str(survivor)]}
            )
        raise _invalid(name, refused)
    now = timezone.now()
    counts = holdings_merge(source=source, target=target, now=now)
    counts["identities"] = ChannelIdentity.objects.filter(memory_user=source).update(
        memory_user=target, updated_at=now
    )
    counts["merged_users"] = MemoryUser.objects.filter(merged_into=source).update(merged_into=target)

    span = MemoryUser.objects.filter(pk__in=[source.pk, target.pk]).aggregate(
        first=Min("first_seen_at"), last=Max("last_seen_at")
    )
    target.first_seen_at, target.last_seen_at = span["first"], span["last"]
    if not target.display_name and source.display_name:
        target.display_name = source.display_name
    update_fields = ["first_seen_at", "last_seen_at", "display_name", "updated_at"]
    changes = {"into": str(target.pk), "counts": counts}
    if source.legal_hold_at is not None and target.legal_hold_at is None:
        # Retention reads the hold of the row's own person: left on the emptied source,
        # the hold would no longer cover the rows it was placed to preserve.
        target.legal_hold_at = source.legal_hold_at
        target.legal_hold_reason = source.legal_hold_reason
        target.legal_hold_by = source.legal_hold_by
        update_fields += ["legal_hold_at", "legal_hold_reason", "legal_hold_by"]
        changes["legal_hold"] = source.legal_hold_reason
    target.save(update_fields=update_fields)
    source.merged_into = target
    source.save(update_fields=["merged_into", "updated_at"])
    # The facts tier rebuilt the preferences cache while moving the facts.
    target.refresh_from_db(fields=["preferences"])
    audit_record(
        workspace=target.workspace,
        actor=actor,
        action=AuditEvent.Action.MERGE,
        entity_type="memory_user",
        entity_id=source.pk,
        changes=changes,
    )
    return MergeResult(target=target, counts=counts)


def _memory_users_erase(*, workspace, ids: list, actor: str) -> dict:
    """Delete the users in `ids`, the users merged into them, and everything they own."""
    # The people and every record merged into them, locked before anything is read: a merge
    # into one of them holds the same locks, so it either commits first (its source is then
    # locked here too) or waits and finds its target gone; a hold placed or released on a
    # merged record at the same moment either lands first or waits.
    people = memory_users_lock(ids=ids, merged=True)
    named = {pk: people[pk].merged_into_id for pk in ids if pk in people}
    # A merged record is empty: its data lives on the survivor. Erasing it alone would report
    # success while everything of the person stays, so the caller is sent to the survivor.
    # Named together with its survivor, it goes with the survivor as below.
    # The survivor named is the end of the record's chain (A merged into B, later B into C: C),
    # the one person whose erasure erases the record; a record whose survivor is named too
    # goes with it.
    survivors = memory_user_survivor_ids(ids=[pk for pk, into in named.items() if into is not None])
    merged = {pk: into for pk, into in survivors.items() if into not in named}
    if merged:
        raise ConflictError(
            MERGED_RECORD_ERASE,
            code="merged",
            fields={
                "ids": [str(pk) for pk in merged],
                "merged_into": [str(into) for into in merged.values()],
            },
        )
    # Merged users are the same person; their data was moved, but their rows and audit
    # trail still name them.
    all_ids = list(people)
    held = [pk for pk, person in people.items() if person.legal_hold_at is not None]
    if held:
        raise ConflictError(UNDER_LEGAL_HOLD, code="legal_hold", fields={"ids": [str(pk) for pk in held]})
    counts = {
        "memory_users": len(all_ids),
        "identities": ChannelIdentity.objects.filter(memory_user__in=all_ids).count(),
        **holdings_count(memory_user_ids=all_ids),
    }
    holdings_erase(memory_user_ids=all_ids)
    ChannelIdentity.objects.filter(memory_user__in=all_ids).delete()
    MemoryUser.objects.filter(merged_into__in=all_ids).update(merged_into=None)
    MemoryUser.objects.filter(pk__in=all_ids).delete()
    for memory_user_id in all_ids:
        # Counts only: the audit trail of an erasure must not keep the erased data.
        audit_record(
            workspace=workspace,
            actor=actor,
            action=AuditEvent.Action.ERASE,
            entity_type="memory_user",
            entity_id=memory_user_id,
            changes={"counts": counts} if memory_user_id in ids else {"erased_with": [str(i) for i in ids]},
        )
    return counts


def memory_user_hold_place(*, memory_user: MemoryUser, reason: str, actor: str) -> MemoryUser:
    """Place a legal hold on the person (again: the reason is replaced); audited."""
    reason = (reason or "").strip()
    if not reason or len(reason) > 500:
        raise ApplicationError(LEGAL_HOLD_REASON_REQUIRED, fields={"reason": [LEGAL_HOLD_REASON_REQUIRED]})
    return locked_retrying(
        lambda: _memory_user_hold_place(memory_user=memory_user, reason=reason, actor=actor)
    )


def _memory_user_hold_place(*, memory_user: MemoryUser, reason: str, actor: str) -> MemoryUser:
    memory_user = memory_users_lock(ids=[memory_user.pk]).get(memory_user.pk)
    if memory_user is None:
        # Erased since the caller read them.
        raise NotFoundError(MEMORY_USER_NOT_FOUND)
    before = memory_user.legal_hold_reason if memory_user.legal_hold_at else None
    memory_user.legal_hold_at = memory_user.legal_hold_at or timezone.now()
    memory_user.legal_hold_reason = reason
    memory_user.legal_hold_by = actor
    memory_user.save(update_fields=["legal_hold_at", "legal_hold_reason", "legal_hold_by", "updated_at"])
    audit_record(
        workspace=memory_user.workspace,
        actor=actor,
        action=AuditEvent.Action.UPDATE,
        entity_type="memory_user",
        entity_id=memory_user.pk,
        changes={"legal_hold": {"before": before, "after": reason}},
    )
    return memory_user


def memory_user_hold_release(
    *, memory_user: MemoryUser, actor: str, placed_on: MemoryUser | None = None
) -> MemoryUser:
    """Release a legal hold that covers the person's data; releasing where there is none
    changes nothing. The hold is the one placed on `placed_on`: the person themself (the
    default) or a record merged into them, directly or along a chain of merges, whose hold still
    covers the rows the merge moved here (memory_user_legal_holds lists both). Returns `memory_user`.

    Anything else is a NotFoundError naming `placed_on`, as for an id that never existed."""
    placed_on_pk = memory_user.pk if placed_on is None else placed_on.pk
    return locked_retrying(
        lambda: _memory_user_hold_release(
            memory_user_pk=memory_user.pk, placed_on_pk=placed_on_pk, actor=actor
        )
    )


def _memory_user_hold_release(*, memory_user_pk, placed_on_pk, actor: str) -> MemoryUser:
    # Both rows locked through the one helper, in key order, so a merge or erasure under way
    # (which locks them with the rest of the person's records) is waited for and the link
    # checked below is the committed one.
    locked = memory_users_lock(ids=[memory_user_pk, placed_on_pk])
    person, holder = locked.get(memory_user_pk), locked.get(placed_on_pk)
    # The hold is the person's when they are on the holder's chain of merges: the holder
    # itself, the record it was merged into, or (older data, A into B, later B into C) a
    # record further along, as memory_user_legal_holds lists them. With the person locked
    # the chain cannot change: only a merge of its last record re-points records, and the
    # records in between were merged, so no merge names them.
    if person is None or holder is None or person.pk not in memory_user_merge_chain(memory_user=holder):
        raise NotFoundError(LEGAL_HOLD_NOT_FOUND, fields={"placed_on": [LEGAL_HOLD_NOT_FOUND]})
    if holder.legal_hold_at is None:
        return person
    before = holder.legal_hold_reason
    holder.legal_hold_at = None
    holder.legal_hold_reason = ""
    holder.legal_hold_by = ""
    holder.save(update_fields=["legal_hold_at", "legal_hold_reason", "legal_hold_by", "updated_at"])
    changes = {"legal_hold": {"before": before, "after": None}}
    if holder.pk != person.pk:
        changes["released_on"] = str(person.pk)
    audit_record(
        workspace=holder.workspace,
        actor=actor,
        action=AuditEvent.Action.UPDATE,
        entity_type="memory_user",
        entity_id=holder.pk,
        changes=changes,
    )
    return person


def memory_user_erase(*, memory_user: MemoryUser, actor: str) -> dict:
    """The right to erasure: delete the person and everything that belongs to them
    (channel identities, users merged into them, and every tier's rows declared to
    core.holdings: threads with their messages, user- and session-scope facts, episodes,
    episodic entries) in one transaction. Returns the counts,
    which an ERASE audit event also records.

    A record merged into another is refused (ConflictError `merged`, naming the survivor, the last
    record of its chain of merges, in `fields.merged_into`): its data is the survivor's now, and
    only erasing the survivor erases it."""
    return locked_retrying(
        lambda: _memory_users_erase(workspace=memory_user.workspace, ids=[memory_user.pk], actor=actor)
    )


def memory_user_batch_delete(*, principal: Principal, ids, actor: str | None = None) -> dict:
    """Erase every memory user in `ids`, or nothing: an unknown id is a 404, a record merged
    into a person not named too a 409 `merged` (as memory_user_erase). Erasure reaches every
    agent's rows, so an agent-bound principal is refused (403)."""
    require_workspace_key(principal)
    with transaction.atomic():
        found = references_resolve(
            MemoryUser.objects.only("pk"),
            principal,
            ids,
            agent_field=None,
            not_found=NotFoundError(MEMORY_USERS_NOT_FOUND, fields={"ids": ["Unknown id."]}),
        )
        return locked_retrying(
            lambda: _memory_users_erase(
                workspace=principal.workspace, ids=[u.pk for u in found], actor=actor or principal.actor
            )
        )
