"""Who may change a workspace-wide procedure (no agent): every agent of the workspace is told
to follow it, so evolving, activating, deactivating, editing and deleting one needs a
workspace-wide key. An agent-bound key reads, matches and records runs of it, and changes its
own agent's procedures as before; another agent's are a 404 to it.

Each write route is run (as core/tests/reliability/test_isolation_matrix.py runs every route)
inside a savepoint that is rolled back, against the same lineages: v1 inactive, v2 active."""

from django.db import transaction

from core.access import principal_for_api_key, principal_for_membership
from core.errors import ApplicationError
from core.models import AuditEvent, Membership
from core.testing import MemoryTestCase
from procedures.models import Procedure
from procedures.services import procedure_create, procedure_delete, procedure_update

LIST = "/api/v1/procedures/"
MATCH = "/api/v1/procedures/match/"
BATCH = "/api/v1/procedures/batch-delete/"
LEARN = "/api/v1/procedures/learn/"
EPISODES = "/api/v1/episodes/"


def detail(procedure):
    return f"{LIST}{procedure.pk}/"


# name: (method, path, body, status when allowed). Each targets v2 (active) but "activate",
# which targets v1 (inactive).
WRITES = {
    "evolve": (
        "post",
        lambda p: LIST,
        lambda p: {"parent": str(p.pk), "procedure_type": "prompt_template", "content": "Skip the queue."},
        201,
    ),
    "edit": ("patch", detail, lambda p: {"content": "Skip the queue."}, 200),
    "rename": ("patch", detail, lambda p: {"name": "Renamed"}, 200),
    "deactivate": ("patch", detail, lambda p: {"is_active": False}, 200),
    "activate": ("patch", detail, lambda p: {"is_active": True}, 200),
    "delete": ("delete", detail, lambda p: None, 200),
    "batch-delete": ("post", lambda p: BATCH, lambda p: {"ids": [str(p.pk)]}, 200),
}


class WorkspaceProcedureAccessTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.lineages = {}
        for owner, agent in (("workspace", None), ("own", cls.agent), ("other", cls.other_agent)):
            v1 = procedure_create(
                workspace=cls.workspace,
                agent=agent,
                name="Escalate",
                procedure_type="prompt_template",
                content="Hand the ticket to a human.",
                trigger_conditions={"goal_contains": ["escalate"]},
            )
            v2 = procedure_create(
                workspace=cls.workspace,
                parent=v1,
                procedure_type="prompt_template",
                content="Hand the ticket to a human at once.",
                trigger_conditions={"goal_contains": ["escalate"]},
            )
            v1.refresh_from_db()
            cls.lineages[owner] = (v1, v2)

    def snapshot(self):
        rows = list(Procedure.objects.filter(workspace=self.workspace).order_by("pk").values())
        return rows, AuditEvent.objects.filter(workspace=self.workspace).count()

    def target(self, owner, route):
        v1, v2 = self.lineages[owner]
        return v1 if route == "activate" else v2

    def request(self, key, route, procedure):
        method, path, body, _ = WRITES[route]
        payload = body(procedure)
        client = self.api(key)
        if payload is None:
            return getattr(client, method)(path(procedure))
        return getattr(client, method)(path(procedure), payload, format="json")

    def isolated(self, run):
        """`run()`'s result; whatever it wrote is rolled back for the next case."""
        with transaction.atomic():
            result = run()
            transaction.set_rollback(True)
        return result

    def test_an_agent_key_may_not_change_a_workspace_procedure(self):
        """403 `workspace_key_required` on every write route, and no row or audit event changes."""
        before = self.snapshot()
        for route in WRITES:
            with self.subTest(route=route):
                procedure = self.target("workspace", route)

                def run(route=route, procedure=procedure):
                    return self.request(self.agent_key, route, procedure), self.snapshot()

                response, after = self.isolated(run)
                assert response.status_code == 403, (route, response.status_code, response.content[:300])
                assert response.json()["error"]["code"] == "workspace_key_required"
                assert after == before, route

    def test_an_agent_key_changes_its_own_agents_procedures(self):
        """Every write route works for the key's own agent's lineage."""
        for route, (_, _, _, allowed) in WRITES.items():
            with self.subTest(route=route):
                procedure = self.target("own", route)

                def run(route=route, procedure=procedure):
                    return self.request(self.agent_key, route, procedure), self.snapshot()

                response, (rows, _) = self.isolated(run)
                assert response.status_code == allowed, (route, response.status_code, response.content[:300])
                changed = [r for r in rows if r["agent_id"] == self.agent.pk]
                assert changed != [r for r in self.snapshot()[0] if r["agent_id"] == self.agent.pk], (
                    f"{route} changed nothing"
                )

    def test_another_agents_procedure_is_not_found(self):
        """404 on every write route, as for an id that does not exist, and nothing changes."""
        before = self.snapshot()
        for route in WRITES:
            with self.subTest(route=route):
                procedure = self.target("other", route)

                def run(route=route, procedure=procedure):
                    return self.request(self.agent_key, route, procedure), self.snapshot()

                response, after = self.isolated(run)
                assert response.status_code == 404, (route, response.status_code, response.content[:300])
                assert after == before, route

    def test_a_workspace_key_changes_workspace_procedures(self):
        """Every write route works for a workspace-wide key on a workspace procedure."""
        before = self.snapshot()
        for route, (_, _, _, allowed) in WRITES.items():
            with self.subTest(route=route):
                procedure = self.target("workspace", route)

                def run(route=route, procedure=procedure):
                    return self.request(self.owner_key, route, procedure), self.snapshot()

                response, after = self.isolated(run)
                assert response.status_code == allowed, (route, response.status_code, response.content[:300])
                assert after != before, route

    def test_a_batch_naming_a_workspace_procedure_deletes_nothing(self):
        """All or nothing: the key's own procedure in the same batch stays too."""
        own, workspace = self.lineages["own"][1], self.lineages["workspace"][1]
        before = self.snapshot()
        response = self.api(self.agent_key).post(
            BATCH, {"ids": [str(own.pk), str(workspace.pk)]}, format="json"
        )
        assert response.status_code == 403, response.json()
        assert self.snapshot() == before

    def test_an_agent_key_still_reads_matches_and_records_runs_of_workspace_procedures(self):
        """Reading, matching and recording an outcome are not changes of what agents are told."""
        v2 = self.lineages["workspace"][1]
        api = self.api(self.agent_key)
        assert api.get(detail(v2)).status_code == 200
        listed = {row["id"] for row in api.get(LIST, {"limit": 100}).json()["results"]}
        assert str(v2.pk) in listed
        matched = api.post(MATCH, {"goal": "escalate this"}, format="json").json()["results"]
        assert str(v2.pk) in {hit["procedure"]["id"] for hit in matched}
        ran = api.post(f"{detail(v2)}runs/", {"success": False, "duration_ms": 900}, format="json")
        assert ran.status_code == 200, ran.json()
        v2.refresh_from_db()
        assert (v2.times_used, v2.failure_count, v2.is_active, v2.version) == (1, 1, True, 2)

    def test_an_agent_keys_learning_pass_counts_runs_of_a_workspace_procedure_and_changes_nothing_else(self):
        """Episodes naming the workspace procedure count as its runs; its content, name and
        active version stay as they were, and no proposal goes to the workspace."""
        v1, v2 = self.lineages["workspace"]
        api = self.api(self.agent_key)
        for _ in range(3):
            created = api.post(
                EPISODES,
                {
                    "trigger_type": "chat",
                    "input": {"goal": "Escalate ticket 12"},
                    "trigger_payload": {"procedure_id": str(v2.pk)},
                    "outcome": "success",
                },
                format="json",
            )
            assert created.status_code == 201, created.json()
        fields = ("name", "content", "is_active", "version", "trigger_conditions", "description")
        before = [Procedure.objects.filter(pk=p.pk).values(*fields).get() for p in (v1, v2)]
        learned = api.post(LEARN, {}, format="json")
        assert learned.status_code == 200, learned.json()
        assert learned.json()["runs_counted"] == 3
        assert [Procedure.objects.filter(pk=p.pk).values(*fields).get() for p in (v1, v2)] == before
        v2.refresh_from_db()
        assert v2.success_count == 3
        assert not Procedure.objects.filter(workspace=self.workspace, agent=None).exclude(name="Escalate")


class WorkspaceProcedureServiceTests(MemoryTestCase):
    """The services refuse the change themselves when a principal is given; operators (the
    /memories pages) and callers without one (admin, system) keep changing workspace procedures."""

    def setUp(self):
        self.procedure = procedure_create(
            workspace=self.workspace, name="Escalate", procedure_type="prompt_template", content="Hand over."
        )
        self.agent_principal = principal_for_api_key(self.agent_api_key)

    def assert_refused(self, call):
        with self.assertRaisesMessage(ApplicationError, "workspace-wide key") as caught:
            call()
        assert (caught.exception.status_code, caught.exception.code) == (403, "workspace_key_required")

    def test_services_refuse_an_agent_key(self):
        """Update, evolve, create workspace-wide and delete: refused, nothing written."""
        self.assert_refused(
            lambda: procedure_update(
                procedure=self.procedure, actor="a", principal=self.agent_principal, is_active=False
            )
        )
        self.assert_refused(
            lambda: procedure_create(
                workspace=self.workspace,
                agent=self.agent,
                parent=self.procedure,
                procedure_type="prompt_template",
                content="Mine now.",
                principal=self.agent_principal,
            )
        )
        self.assert_refused(
            lambda: procedure_create(
                workspace=self.workspace,
                name="For everyone",
                procedure_type="prompt_template",
                content="x",
                principal=self.agent_principal,
            )
        )
        self.assert_refused(
            lambda: procedure_delete(procedure=self.procedure, actor="a", principal=self.agent_principal)
        )
        self.procedure.refresh_from_db()
        assert (self.procedure.is_active, Procedure.objects.count()) == (True, 1)

    def test_an_operator_changes_workspace_procedures(self):
        """An editor's membership principal has no agent: the change goes through."""
        membership = Membership.objects.get(user=self.teammate, workspace=self.workspace)
        principal = principal_for_membership(membership)
        procedure_update(
            procedure=self.procedure, actor=principal.actor, principal=principal, is_active=False
        )
        self.procedure.refresh_from_db()
        assert self.procedure.is_active is False
