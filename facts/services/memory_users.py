"""What facts do for memory users: the preferences cache and the facts part of a merge."""

from facts.models import Fact
from identities.models import MemoryUser
from identities.services import memory_users_hold


def memory_user_preferences_sync(*, memory_user_ids) -> None:
    """Rebuild each memory user's cached `preferences` from their current user-scope
    `user_preference` facts (the facts are the truth; the cache is derived)."""
    for memory_user_id in memory_user_ids:
        if memory_user_id is None:
            continue
        preferences = dict(
            Fact.objects.filter(
                memory_user_id=memory_user_id,
                scope=Fact.Scope.USER,
                fact_type=Fact.FactType.USER_PREFERENCE,
                valid_to__isnull=True,
            )
            .order_by("valid_from")
            .values_list("key", "value")
        )
        MemoryUser.objects.filter(pk=memory_user_id).update(preferences=preferences)


def memory_user_facts_merge(*, source, target, now) -> dict:
    """The facts part of a memory-user merge (core.holdings), in the caller's transaction.

    Two current user-scope facts with the same key: the newer (valid_from) stays current,
    the older is closed and superseded by it, so it stays in the key's history. Closing
    happens before the move, or the partial unique index on current versions would reject
    it; the closed one ages from the merge, the moved ones keep their age (retention ages facts
    by updated_at). The preferences caches of both users are rebuilt afterwards.
    """
    source_current = {
        f.key: f
        for f in Fact.objects.select_for_update().filter(
            memory_user=source, scope=Fact.Scope.USER, valid_to__isnull=True
        )
    }
    conflicts = 0
    if source_current:
        for kept in Fact.objects.select_for_update().filter(
            memory_user=target, scope=Fact.Scope.USER, valid_to__isnull=True, key__in=list(source_current)
        ):
            other = source_current[kept.key]
            newer, older = (other, kept) if other.valid_from > kept.valid_from else (kept, other)
            Fact.objects.filter(pk=older.pk).update(
                valid_to=now,
                superseded_by=newer,
                times_contradicted=older.times_contradicted + 1,
                updated_at=now,
            )
            conflicts += 1
    # updated_at stays: retention ages facts by it, and moving a fact to the person it always
    # belonged to neither confirms nor changes it.
    moved = Fact.objects.filter(memory_user=source).update(memory_user=target)
    memory_user_preferences_sync(memory_user_ids=[target.pk, source.pk])
    return {"facts": moved, "fact_conflicts": conflicts}


def facts_people_hold(*, fact_ids) -> None:
    """Inside a transaction, before any of the facts `fact_ids` is locked: hold the people of
    the user facts among them (identities.services.memory_users_hold, FOR KEY SHARE).

    Deleting or deciding such a fact rebuilds its person's preferences, an UPDATE of the
    person's row, after the fact is locked. An erasure or a merge locks the person first and
    then the facts: each waited for the other. Held first, as fact_remember holds the person
    of the fact it writes, the erasure or merge waits for this transaction, or this one for
    it (and then finds the facts gone or moved)."""
    people = (
        Fact.objects.filter(pk__in=list(fact_ids), scope=Fact.Scope.USER, memory_user__isnull=False)
        .order_by()
        .values_list("memory_user_id", flat=True)
        .distinct()
    )
    people = list(people)
    if people:
        memory_users_hold(ids=people)
