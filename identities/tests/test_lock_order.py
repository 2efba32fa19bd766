"""Writes that lock more than one memory-user row, run on two connections at once.

Each of them (merge, hold place and release, erasure, identify) once took its memory-user row
locks in an order of its own: a merge locked its two people and then re-pointed the records
merged into the source, an erasure locked the named people and then the held records merged
into them, identify locked a channel identity before its person. Two of them crossing on the
same rows waited for each other until PostgreSQL aborted one (a deadlock: a 503 to the
operator, or a failed merge). Now each takes every memory-user row it writes in one statement,
in key order (identities.services.memory_users_lock), before any other row.
"""

import threading
import uuid
from unittest import mock

from django.db import connection, transaction
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from core.access import Principal
from core.errors import ConflictError, NotFoundError
from core.models import Agent
from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from identities import services
from identities.models import ChannelIdentity, MemoryUser
from identities.services import (
    UNDER_LEGAL_HOLD,
    memory_user_batch_delete,
    memory_user_erase,
    memory_user_hold_place,
    memory_user_hold_release,
    memory_user_identify,
    memory_user_merge,
    memory_users_hold,
)
from threads.models import Thread

WAIT_SECONDS = 30
# Keys in a chosen order: which of two rows a write locks first is the point of these tests.
LOW, MIDDLE, HIGH, TOP = (uuid.UUID(int=n) for n in (1, 2, 3, 4))


def paused(module, name, moved: threading.Event, release: threading.Event):
    """`module.name` patched to run as before, then wait for `release` (after setting `moved`) on
    its first call: the caller holds the locks it took before that call meanwhile."""
    original = getattr(module, name)
    calls = []

    def pause(*args, **kwargs):
        result = original(*args, **kwargs)
        if not calls:
            calls.append(1)
            moved.set()
            release.wait(WAIT_SECONDS)
        return result

    return mock.patch.object(module, name, pause)


def deadlocks(errors) -> list:
    return [e for e in errors if "deadlock" in str(e).lower()]


class LockOrderRaceTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent: Agent = agent_get_or_create(workspace=self.workspace, slug="assistant")

    def person(self, pk, name, **fields) -> MemoryUser:
        return MemoryUser.objects.create(
            pk=pk, workspace=self.workspace, canonical_id=f"web:{name}", display_name=name, **fields
        )

    def race(self, first, second, hook):
        """`first` runs until `hook` pauses it, `second` then waits on a lock, `first` goes on."""
        moved, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        with paused(*hook, moved, release):
            one = thread_started(first, errors)
            assert moved.wait(WAIT_SECONDS)
            two = thread_started(second, errors)
            until_a_backend_waits(WAIT_SECONDS)
            release.set()
            one.join(WAIT_SECONDS)
            two.join(WAIT_SECONDS)
        assert not one.is_alive() and not two.is_alive()
        return errors

    def test_releasing_a_hold_while_the_person_is_merged_away_does_not_deadlock(self):
        """Before: the release locked the holder (lower key), then waited for the person the
        merge held; the merge then re-pointed the holder and waited for the release: a
        deadlock, and the merge was aborted. Now the merge locks the holder with its people,
        the release waits for all of it, and then finds the person merged away (a 404)."""
        holder = self.person(LOW, "ann")
        person = self.person(MIDDLE, "bo")
        target = self.person(HIGH, "cy")
        memory_user_hold_place(memory_user=holder, reason="Case 7", actor="operator:owner")
        memory_user_merge(source=holder, target=person, actor="operator:owner")
        Thread.objects.create(workspace=self.workspace, agent=self.agent, memory_user=person)

        errors = self.race(
            lambda: memory_user_merge(source=person, target=target, actor="operator:owner"),
            lambda: memory_user_hold_release(memory_user=person, placed_on=holder, actor="operator:owner"),
            (services, "holdings_merge"),
        )

        assert deadlocks(errors) == []
        assert [type(e) for e in errors] == [NotFoundError]
        holder.refresh_from_db()
        person.refresh_from_db()
        assert person.merged_into_id == target.pk and holder.merged_into_id == target.pk
        # The hold was not released: it still covers the rows now on the target.
        assert holder.legal_hold_at is not None
        assert Thread.objects.get().memory_user_id == target.pk

    def test_a_release_that_locked_first_lets_the_merge_follow(self):
        holder = self.person(LOW, "ann")
        person = self.person(MIDDLE, "bo")
        target = self.person(HIGH, "cy")
        memory_user_hold_place(memory_user=holder, reason="Case 7", actor="operator:owner")
        memory_user_merge(source=holder, target=person, actor="operator:owner")

        errors = self.race(
            lambda: memory_user_hold_release(memory_user=person, placed_on=holder, actor="operator:owner"),
            lambda: memory_user_merge(source=person, target=target, actor="operator:owner"),
            (services, "audit_record"),
        )

        assert errors == []
        holder.refresh_from_db()
        assert holder.legal_hold_at is None and holder.merged_into_id == target.pk

    def test_erasing_a_person_while_a_merged_record_hold_is_released_does_not_deadlock(self):
        """Before: the erasure locked the person, then (after reading who was merged into them)
        the held records; the release had locked the held record (lower key) and waited for
        the person: a deadlock. Now the erasure locks the person with every record merged
        into them; the release waits, and the erasure is refused for the hold it still sees."""
        holder = self.person(LOW, "ann")
        person = self.person(MIDDLE, "bo")
        memory_user_hold_place(memory_user=holder, reason="Case 7", actor="operator:owner")
        memory_user_merge(source=holder, target=person, actor="operator:owner")

        errors = self.race(
            lambda: memory_user_erase(memory_user=person, actor="operator:owner"),
            lambda: memory_user_hold_release(memory_user=person, placed_on=holder, actor="operator:owner"),
            (services, "memory_user_survivor_ids"),
        )

        assert deadlocks(errors) == []
        assert [type(e) for e in errors] == [ConflictError]
        assert errors[0].message == UNDER_LEGAL_HOLD
        holder.refresh_from_db()
        assert holder.legal_hold_at is None
        assert MemoryUser.objects.filter(pk=person.pk).exists()

    def test_identify_while_the_person_is_merged_does_not_deadlock(self):
        """Before: identify locked the channel identity, then waited for its person, which the
        merge held while it waited to move that identity: a deadlock. Now identify locks the
        person first, and after the merge resolves the identity to the target."""
        source = self.person(LOW, "ann")
        target = self.person(HIGH, "cy")
        ChannelIdentity.objects.create(
            workspace=self.workspace, memory_user=source, channel="email", external_id="ann"
        )
        results = []

        errors = self.race(
            lambda: memory_user_merge(source=source, target=target, actor="operator:owner"),
            lambda: results.append(
                memory_user_identify(workspace=self.workspace, channel="email", external_id="ann")
            ),
            (services, "holdings_merge"),
        )

        assert deadlocks(errors) == []
        assert errors == []
        assert results[0].memory_user.pk == target.pk
        assert ChannelIdentity.objects.get().memory_user_id == target.pk
        source.refresh_from_db()
        assert source.merged_into_id == target.pk


class MergeChainRaceTests(TransactionTestCase):
    """Merging A into B while B is merged into C never leaves A -> B -> C nor a cycle."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.a, self.b, self.c = (
            MemoryUser.objects.create(pk=pk, workspace=self.workspace, canonical_id=f"web:{name}")
            for pk, name in ((MIDDLE, "a"), (LOW, "b"), (TOP, "c"))
        )
        for person in (self.a, self.b):
            Thread.objects.create(workspace=self.workspace, agent=agent, memory_user=person)

    def race(self, first, second):
        moved, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        with paused(services, "holdings_merge", moved, release):
            one = thread_started(lambda: memory_user_merge(actor="operator:owner", **first), errors)
            assert moved.wait(WAIT_SECONDS)
            two = thread_started(lambda: memory_user_merge(actor="operator:owner", **second), errors)
            until_a_backend_waits(WAIT_SECONDS)
            release.set()
            one.join(WAIT_SECONDS)
            two.join(WAIT_SECONDS)
        return errors

    def links(self):
        return dict(MemoryUser.objects.values_list("pk", "merged_into_id"))

    def test_b_into_c_first_then_a_into_b_is_a_409_naming_c(self):
        """A target merged while the request ran is a conflict naming the survivor, not the
        400 a request naming a merged target gets: the client can retry with C."""
        errors = self.race({"source": self.b, "target": self.c}, {"source": self.a, "target": self.b})

        assert [type(e) for e in errors] == [ConflictError]
        assert errors[0].message == services.MERGE_TARGET_MERGED_MEANWHILE
        assert errors[0].fields["merged_into"] == [str(self.c.pk)]
        assert self.links() == {self.a.pk: None, self.b.pk: self.c.pk, self.c.pk: None}
        assert sorted(Thread.objects.values_list("memory_user_id", flat=True)) == [self.a.pk, self.c.pk]

    def test_a_into_b_first_then_b_into_c_re_points_a_to_c(self):
        errors = self.race({"source": self.a, "target": self.b}, {"source": self.b, "target": self.c})

        assert errors == []
        assert self.links() == {self.a.pk: self.c.pk, self.b.pk: self.c.pk, self.c.pk: None}
        assert set(Thread.objects.values_list("memory_user_id", flat=True)) == {self.c.pk}

    def test_crossing_merges_of_a_and_c_leave_no_cycle(self):
        errors = self.race({"source": self.a, "target": self.c}, {"source": self.c, "target": self.a})

        assert len(errors) == 1 and isinstance(errors[0], ConflictError)
        assert self.links()[self.c.pk] is None and self.links()[self.a.pk] == self.c.pk


class OneLockHelperTests(TransactionTestCase):
    """Every memory-user row lock of these writes is the helper's one statement in key order."""

    def test_every_write_locks_memory_users_only_through_the_helper(self):
        workspace = workspace_create(name="Acme")
        ann, bo, cy, dee = (
            MemoryUser.objects.create(workspace=workspace, canonical_id=f"web:{n}")
            for n in ("a", "b", "c", "d")
        )
        ChannelIdentity.objects.create(workspace=workspace, memory_user=ann, channel="web", external_id="a")
        table = MemoryUser._meta.db_table
        writes = [
            lambda: memory_user_identify(workspace=workspace, channel="web", external_id="a"),
            lambda: memory_user_identify(workspace=workspace, channel="web", external_id="new"),
            lambda: memory_user_hold_place(memory_user=ann, reason="Case 1", actor="operator:owner"),
            lambda: memory_user_merge(source=ann, target=bo, actor="operator:owner"),
            lambda: memory_user_hold_release(memory_user=bo, placed_on=ann, actor="operator:owner"),
            # The merge carried the hold to Bo as well.
            lambda: memory_user_hold_release(memory_user=bo, actor="operator:owner"),
            lambda: memory_user_identify(workspace=workspace, channel="web", external_id="a"),
            lambda: memory_user_erase(memory_user=bo, actor="operator:owner"),
            lambda: memory_user_erase(memory_user=cy, actor="operator:owner"),
            lambda: memory_user_batch_delete(
                principal=Principal(workspace=workspace, role="admin"), ids=[dee.pk], actor="operator:owner"
            ),
        ]
        for write in writes:
            with CaptureQueriesContext(connection) as queries:
                write()
            locks = [q["sql"] for q in queries if " FOR " in q["sql"] and table in q["sql"]]
            assert locks, "each of these writes locks a memory user"
            for sql in locks:
                # The helper's statement locks only the memory-user table, in key order.
                assert sql.lstrip().startswith("WITH RECURSIVE up"), sql
                assert sql.rstrip().endswith(f'ORDER BY id FOR UPDATE OF "{table}"'), sql
            assert len(locks) == 1, locks


# Keys chosen so the chain's end sorts before its start: C and D below A and B.
CHAIN_C, CHAIN_D, CHAIN_A, CHAIN_B = (uuid.UUID(int=n) for n in (1, 2, 10, 11))


class HoldChainRaceTests(TransactionTestCase):
    def test_a_hold_on_a_two_hop_chain_and_a_merge_of_its_end_do_not_deadlock(self):
        """memory_users_hold (facts, vectors) on A of an older chain A -> B -> C, while C is
        merged into D. Taken hop by hop, the hold held A and B, and the merge, holding C, waited
        for A (PostgreSQL aborted one). The whole chain in one key-ordered statement: the hold
        and the merge run one after the other."""
        ws = workspace_create(name="Acme")

        def person(pk, name, into=None):
            return MemoryUser.objects.create(
                pk=pk, workspace=ws, canonical_id=f"web:{name}", display_name=name, merged_into_id=into
            )

        person(CHAIN_C, "c")
        person(CHAIN_D, "d")
        person(CHAIN_B, "b", into=CHAIN_C)
        person(CHAIN_A, "a", into=CHAIN_B)
        first_done, go = threading.Event(), threading.Event()
        original = services._memory_users_held
        calls = []

        def paused(*, ids):
            result = original(ids=ids)
            if not calls:
                calls.append(1)
                first_done.set()
                go.wait(30)
            return result

        errors: list = []
        results = {}

        def hold():
            with transaction.atomic():
                results["hold"] = memory_users_hold(ids=[CHAIN_A])

        with mock.patch.object(services, "_memory_users_held", paused):
            holder = thread_started(hold, errors)
            assert first_done.wait(30)
            merger = thread_started(
                lambda: memory_user_merge(
                    source=MemoryUser.objects.get(pk=CHAIN_C),
                    target=MemoryUser.objects.get(pk=CHAIN_D),
                    actor="t",
                ),
                errors,
            )
            until_a_backend_waits()
            go.set()
            holder.join(60)
            merger.join(60)
        assert [str(e) for e in errors] == []
        assert results["hold"] in ({CHAIN_A: CHAIN_C}, {CHAIN_A: CHAIN_D})
