"""procedure_lineage_lock holds a lineage (workspace, agent, name) even before it has a row:
two first creates of one name at the same instant run one after the other, the second
answering as it would after the first, while lineages of other names or agents never wait."""

import threading

from django.db import connection, transaction
from django.test import TransactionTestCase

from core.errors import ConflictError
from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from procedures.models import Procedure
from procedures.services import procedure_create, procedure_lineage_lock
from procedures.services.procedures import LINEAGE_LOCK_BUCKETS, _lineage_key


def create(workspace, *, name="Deploy", agent=None, content="v1"):
    return procedure_create(
        workspace=workspace, agent=agent, name=name, procedure_type="prompt_template", content=content
    )


def lineage_waiters() -> int:
    """Backends of the test database waiting on an advisory lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted"
        )
        return cursor.fetchone()[0]


class FirstCreateRaceTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")

    def race(self, second):
        """A first "Deploy" of the agent created in a transaction still open while `second` runs."""
        created, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def first():
            with transaction.atomic():
                create(self.workspace, agent=self.agent, content="first")
                created.set()
                release.wait(30)

        first_thread = thread_started(first, errors)
        assert created.wait(30)
        second_thread = thread_started(second, errors)
        until_a_backend_waits(timeout=10)
        waiting = lineage_waiters()
        release.set()
        first_thread.join(30)
        second_thread.join(30)
        return errors, waiting

    def test_two_first_creates_of_one_name_end_as_one_after_the_other(self):
        """The second waits on the lineage lock, not on the index, and answers the 409 the
        same create gives once the first is stored; the first one's row is the only one."""
        errors, waiting = self.race(lambda: create(self.workspace, agent=self.agent, content="second"))
        assert waiting == 1
        assert [type(e) for e in errors] == [ConflictError]
        with self.assertRaisesMessage(ConflictError, errors[0].message):
            create(self.workspace, agent=self.agent, content="second")
        rows = Procedure.objects.filter(workspace=self.workspace)
        assert list(rows.values_list("version", "is_active", "content")) == [(1, True, "first")]

    def test_other_names_and_agents_do_not_wait(self):
        """The lock is per lineage: another name, the workspace-wide lineage of a name and
        another workspace are created while the first create is still open. (Two lineages of a
        workspace share a lock 1 time in LINEAGE_LOCK_BUCKETS: the names are chosen apart.)"""
        other = workspace_create(name="Globex")
        held = _lineage_key(self.workspace.pk, self.agent.pk, "Deploy")
        candidates = [f"Ship {n}" for n in range(10)]
        ship = next(n for n in candidates if _lineage_key(self.workspace.pk, self.agent.pk, n) != held)
        shared = next(n for n in candidates if _lineage_key(self.workspace.pk, None, n) != held)

        def others():
            create(self.workspace, agent=self.agent, name=ship)
            create(self.workspace, name=shared)
            create(other, name="Deploy")

        created, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def first():
            with transaction.atomic():
                create(self.workspace, agent=self.agent, content="first")
                created.set()
                release.wait(30)

        first_thread = thread_started(first, errors)
        assert created.wait(30)
        others_thread = thread_started(others, errors)
        others_thread.join(30)
        finished_while_held = not others_thread.is_alive()
        release.set()
        first_thread.join(30)

        assert finished_while_held
        assert errors == []
        assert Procedure.objects.filter(is_active=True).count() == 4

    def test_the_lock_holds_a_lineage_with_no_row(self):
        """Taken outside any service (as review and the import take it), with nothing stored."""
        held, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def holder():
            with transaction.atomic():
                procedure_lineage_lock(workspace_id=self.workspace.pk, lineages=[(self.agent.pk, "Deploy")])
                held.set()
                release.wait(30)

        holder_thread = thread_started(holder, errors)
        assert held.wait(30)
        create_thread = thread_started(lambda: create(self.workspace, agent=self.agent), errors)
        until_a_backend_waits(timeout=10)
        assert lineage_waiters() == 1
        assert not Procedure.objects.exists()
        release.set()
        holder_thread.join(30)
        create_thread.join(30)
        assert errors == []
        assert Procedure.objects.filter(workspace=self.workspace).count() == 1


class LineageLockCountTests(TransactionTestCase):
    def test_an_import_sized_lock_holds_a_bounded_number_of_advisory_locks(self):
        """Thousands of lineages in one transaction (an import) take at most
        LINEAGE_LOCK_BUCKETS advisory locks: PostgreSQL's shared lock table is not exhausted."""
        workspace = workspace_create(name="Acme")
        with transaction.atomic():
            procedure_lineage_lock(
                workspace_id=workspace.pk, lineages=[(None, f"Procedure {n}") for n in range(3000)]
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                )
                held = cursor.fetchone()[0]
        assert 0 < held <= LINEAGE_LOCK_BUCKETS
