"""One active version per lineage (procedures_active_version): an imported active version of a
name the target already runs another version of is stored inactive and reported; the target's
active version stays, and no row of either side is lost."""

from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes, refund
from procedures.models import Procedure
from procedures.services import procedure_create


def versions(workspace) -> list:
    return list(
        Procedure.objects.filter(workspace=workspace)
        .order_by("agent__slug", "name", "version", "content")
        .values_list("agent__slug", "name", "version", "is_active", "content")
    )


def kept_inactive(report) -> list:
    return [c for c in report["conflicts"] if c["rule"] == "procedure_kept_inactive"]


class ProcedureActiveVersionImportTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        first = refund(cls.workspace, cls.agent, "Say sorry, then refund.")
        refund(cls.workspace, cls.agent, "Say sorry, refund, then follow up.", parent=first)
        # A workspace-wide lineage (agent NULL): the index treats NULLs as equal.
        procedure_create(
            workspace=cls.workspace, name="Greet", procedure_type="prompt_template", content="Hello there."
        )

    def setUp(self):
        self.target = workspace_create(name="Target")
        self.target_agent = agent_get_or_create(workspace=self.target, slug=self.agent.slug)

    def test_an_active_version_of_a_name_the_target_runs_is_kept_inactive(self):
        """The target runs its own Refund v1 and Greet v1; the file's active Refund v2 and Greet
        v4 are new rows of those lineages: stored inactive, each reported."""
        mine = refund(self.target, self.target_agent, "Escalate to a human.")
        Procedure.objects.filter(workspace=self.workspace, name="Greet").update(version=4)
        greet = procedure_create(
            workspace=self.target, name="Greet", procedure_type="prompt_template", content="Hi."
        )
        report = import_bytes(self.target, export_bytes(Scope(workspace=self.workspace)))

        assert report["created"]["procedure"] == 2
        assert report["reused"]["procedure"] == 1
        assert versions(self.target) == [
            ("assistant", "Refund", 1, True, "Escalate to a human."),
            ("assistant", "Refund", 2, False, "Say sorry, refund, then follow up."),
            (None, "Greet", 1, True, "Hi."),
            (None, "Greet", 4, False, "Hello there."),
        ]
        assert Procedure.objects.get(pk=mine.pk).is_active
        assert Procedure.objects.get(pk=greet.pk).is_active
        conflicts = kept_inactive(report)
        assert [(c["type"], c["detail"]["name"], c["detail"]["version"]) for c in conflicts] == [
            ("procedure", "Refund", 2),
            ("procedure", "Greet", 4),
        ]
        assert {c["detail"]["active_version"] for c in conflicts} == {1}
        assert report["conflict_count"] == len(report["conflicts"])

        # The same file again: nothing created, nothing changed, no new conflict.
        after = versions(self.target)
        again = import_bytes(self.target, export_bytes(Scope(workspace=self.workspace)))
        assert again["created"] == {}
        assert kept_inactive(again) == []
        assert versions(self.target) == after

    def test_without_a_conflict_the_imported_active_version_stays_active(self):
        """An empty target, and a target holding only inactive versions of the name."""
        old = refund(self.target, self.target_agent, "Escalate to a human.")
        Procedure.objects.filter(pk=old.pk).update(version=7, is_active=False)
        data = export_bytes(Scope(workspace=self.workspace))
        report = import_bytes(self.target, data)
        assert kept_inactive(report) == []
        assert report["created"]["procedure"] == 3
        active = Procedure.objects.filter(workspace=self.target, is_active=True)
        assert sorted(active.values_list("name", "version")) == [("Greet", 1), ("Refund", 2)]
        assert not Procedure.objects.get(pk=old.pk).is_active

        again = import_bytes(self.target, data)
        assert again["created"] == {}
        assert sum(again["already_imported"].values()) == again["records"]
        assert sorted(active.values_list("name", "version")) == [("Greet", 1), ("Refund", 2)]

    def test_a_dry_run_reports_the_version_it_would_keep_inactive(self):
        refund(self.target, self.target_agent, "Escalate to a human.")
        report = import_bytes(self.target, export_bytes(Scope(workspace=self.workspace)), dry_run=True)
        assert [c["detail"]["version"] for c in kept_inactive(report)] == [2]
        assert Procedure.objects.filter(workspace=self.target).count() == 1
