"""One active version per lineage (workspace, agent, name): activations and evolutions that
race end as if one ran after the other, the index procedures_active_version refuses a second
active version however it is written, and migration 0012 resolves the duplicates earlier races
left without deleting a row."""

import threading

from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from core.errors import ConflictError
from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase, migrate_to, thread_started, until_a_backend_waits
from procedures.models import Procedure
from procedures.services import PROCEDURE_ACTIVE_TAKEN, procedure_create, procedure_update

BEFORE = [("procedures", "0011_procedure_search_vector")]
LIST = "/api/v1/procedures/"


def lineage(workspace, *, versions: int, agent=None, name="Deploy") -> list[Procedure]:
    first = procedure_create(
        workspace=workspace, agent=agent, name=name, procedure_type="prompt_template", content="v1"
    )
    made = [first]
    for n in range(2, versions + 1):
        made.append(
            procedure_create(
                workspace=workspace, parent=made[-1], procedure_type="prompt_template", content=f"v{n}"
            )
        )
    for procedure in made:
        procedure.refresh_from_db()
    return made


def active_versions(workspace, agent=None, name="Deploy") -> list[int]:
    return list(
        Procedure.objects.filter(workspace=workspace, agent=agent, name=name, is_active=True)
        .order_by("version")
        .values_list("version", flat=True)
    )


class ActivationRaceTests(TransactionTestCase):
    def test_two_activations_at_once_leave_the_later_one_active(self):
        """v1 is activated in a transaction still open while v2 is activated: the second waits
        for the first, then deactivates v1, exactly as if it had started after it."""
        workspace = workspace_create(name="Acme")
        v1, v2 = lineage(workspace, versions=2)
        procedure_update(procedure=v2, actor="test", is_active=False)
        v2.refresh_from_db()
        activated, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def first():
            with transaction.atomic():
                procedure_update(procedure=v1, actor="first", is_active=True)
                activated.set()
                release.wait(30)

        first_thread = thread_started(first, errors)
        assert activated.wait(30)
        second_thread = thread_started(
            lambda: procedure_update(procedure=v2, actor="second", is_active=True), errors
        )
        until_a_backend_waits(timeout=10)
        release.set()
        first_thread.join(30)
        second_thread.join(30)

        assert errors == []
        assert active_versions(workspace) == [2]
        assert Procedure.objects.filter(workspace=workspace).count() == 2

    def test_two_evolutions_of_one_parent_at_once_get_consecutive_versions(self):
        """The second evolution waits for the first, then numbers itself after it: v2 and v3,
        v3 the one active version, and no 409."""
        workspace = workspace_create(name="Acme")
        (v1,) = lineage(workspace, versions=1)
        created, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def evolve(content):
            return lambda: procedure_create(
                workspace=workspace, parent=v1, procedure_type="prompt_template", content=content
            )

        def first():
            with transaction.atomic():
                evolve("first")()
                created.set()
                release.wait(30)

        first_thread = thread_started(first, errors)
        assert created.wait(30)
        second_thread = thread_started(evolve("second"), errors)
        until_a_backend_waits(timeout=10)
        release.set()
        first_thread.join(30)
        second_thread.join(30)

        assert errors == []
        rows = dict(Procedure.objects.filter(workspace=workspace).values_list("version", "content"))
        assert rows == {1: "v1", 2: "first", 3: "second"}
        assert active_versions(workspace) == [3]


class ActiveVersionIndexTests(MemoryTestCase):
    def test_a_second_active_version_is_refused_by_the_database(self):
        """A write that bypasses the services cannot make two versions of a lineage active."""
        v1, _ = lineage(self.workspace, versions=2)
        with self.assertRaises(IntegrityError), transaction.atomic():
            Procedure.objects.filter(pk=v1.pk).update(is_active=True)

    def test_lineages_are_per_agent(self):
        """The workspace's "Deploy" and an agent's "Deploy" are two lineages, both active."""
        lineage(self.workspace, versions=1)
        lineage(self.workspace, versions=1, agent=self.agent)
        assert active_versions(self.workspace) == [1]
        assert active_versions(self.workspace, agent=self.agent) == [1]

    def test_renaming_onto_an_active_lineage_is_a_409_naming_the_field(self):
        """The rename would leave two active versions of one name: refused, nothing changed."""
        lineage(self.workspace, versions=2)
        *_, other = lineage(self.workspace, versions=3, name="Ship")
        response = self.api().patch(f"{LIST}{other.pk}/", {"name": "Deploy"}, format="json")
        assert response.status_code == 409, response.json()
        assert response.json()["error"]["fields"] == {"name": [PROCEDURE_ACTIVE_TAKEN]}
        other.refresh_from_db()
        assert other.name == "Ship"

    def test_an_unparented_create_beside_an_active_version_is_a_409(self):
        """v1 deleted, v2 active: a new "Deploy" v1 would be a second active version."""
        v1, _ = lineage(self.workspace, versions=2)
        v1.delete()
        with self.assertRaisesMessage(ConflictError, PROCEDURE_ACTIVE_TAKEN):
            procedure_create(
                workspace=self.workspace, name="Deploy", procedure_type="prompt_template", content="x"
            )
        assert active_versions(self.workspace) == [2]


class ActiveVersionMigrationTests(TransactionTestCase):
    def setUp(self):
        self.addCleanup(migrate_to)

    def test_duplicates_keep_the_newest_active_and_no_row_is_lost(self):
        acme = workspace_create(name="Acme")
        globex = workspace_create(name="Globex")
        support = agent_get_or_create(workspace=acme, slug="support")
        migrate_to(BEFORE)
        old = (
            MigrationExecutor(connection)
            .loader.project_state(BEFORE)
            .apps.get_model("procedures", "Procedure")
        )

        def make(workspace, agent, name, version, active):
            return old.objects.create(
                workspace_id=workspace.pk,
                agent_id=agent.pk if agent else None,
                name=name,
                version=version,
                is_active=active,
                procedure_type="prompt_template",
                content=f"{name} v{version}",
            ).pk

        # (workspace, agent, name): versions made active by races, and lineages left alone.
        made = {
            "acme deploy": [make(acme, None, "Deploy", v, True) for v in (1, 2, 3)],
            "support deploy": [
                make(acme, support, "Deploy", 1, True),
                make(acme, support, "Deploy", 2, False),
            ],
            "support greet": [
                make(acme, support, "Greet", v, active) for v, active in ((1, False), (2, True), (3, True))
            ],
            "globex deploy": [make(globex, None, "Deploy", v, True) for v in (1, 2)],
        }
        total = old.objects.count()

        migrate_to()

        assert Procedure.objects.count() == total
        assert active_versions(acme) == [3]
        assert active_versions(acme, agent=support) == [1]
        assert active_versions(acme, agent=support, name="Greet") == [3]
        assert active_versions(globex) == [2]
        kept = set(Procedure.objects.filter(is_active=True).values_list("pk", flat=True))
        assert kept == {
            made["acme deploy"][2],
            made["support deploy"][0],
            made["support greet"][2],
            made["globex deploy"][1],
        }
        with self.assertRaises(IntegrityError), transaction.atomic():
            Procedure.objects.filter(pk=made["acme deploy"][0]).update(is_active=True)

        migrate_to(BEFORE)
        assert old.objects.count() == total
        migrate_to()
        assert Procedure.objects.count() == total
