"""Only one version of a procedure fires, however its versions were made or activated."""

from core.testing import MemoryTestCase
from procedures.models import Procedure
from procedures.services import procedure_create

LIST = "/api/v1/procedures/"
MATCH = "/api/v1/procedures/match/"


class ProcedureOneActiveVersionTests(MemoryTestCase):
    def setUp(self):
        self.v1 = procedure_create(
            workspace=self.workspace,
            name="Deploy",
            procedure_type="prompt_template",
            content="Build, then upload.",
            trigger_conditions={"goal_contains": ["deploy"]},
        )

    def evolve(self, content):
        response = self.api().post(
            LIST,
            {
                "parent": str(self.v1.pk),
                "procedure_type": "prompt_template",
                "content": content,
                "trigger_conditions": {"goal_contains": ["deploy"]},
            },
            format="json",
        )
        assert response.status_code == 201, response.json()
        return response.json()

    def matched_versions(self):
        response = self.api().post(MATCH, {"goal": "deploy the site"}, format="json")
        assert response.status_code == 200, response.json()
        return [hit["procedure"]["version"] for hit in response.json()["results"]]

    def test_evolving_the_same_parent_twice_leaves_only_the_newest_active(self):
        """A second evolution of v1 deactivates v2 as well: match offers v3 alone."""
        self.evolve("Build, test, upload.")
        v3 = self.evolve("Build, test, upload, announce.")
        assert v3["version"] == 3
        active = Procedure.objects.filter(name="Deploy", is_active=True).values_list("version", flat=True)
        assert list(active) == [3]
        assert self.matched_versions() == [3]

    def test_reactivating_an_old_version_deactivates_the_newer_one(self):
        """Rolling back by activating v1 makes v1 the one version that fires."""
        v2 = self.evolve("Build, test, upload.")
        response = self.api().patch(f"{LIST}{self.v1.pk}/", {"is_active": True}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["is_active"] is True
        assert Procedure.objects.get(pk=v2["id"]).is_active is False
        assert self.matched_versions() == [1]

    def test_a_new_version_starts_its_own_run_counts(self):
        """Counters measure one version's content: the parent keeps its runs, the child starts at 0."""
        runs = f"{LIST}{self.v1.pk}/runs/"
        assert self.api().post(runs, {"success": True}, format="json").status_code == 200
        v2 = self.evolve("Build, test, upload.")
        assert (v2["times_used"], v2["success_count"]) == (0, 0)
        self.v1.refresh_from_db()
        assert (self.v1.times_used, self.v1.success_count) == (1, 1)
