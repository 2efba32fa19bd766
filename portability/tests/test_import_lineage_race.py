"""An import racing the first procedure_create of a name it also brings: the two run one after
the other (the procedure lineage lock exists before the lineage has a row), so the import
reports the name as it reports any version the target already holds, instead of failing the
whole run with a 400 at the insert."""

from django.test import TransactionTestCase

from core.errors import ConflictError
from core.services import agent_get_or_create, workspace_create
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes, refund, while_held
from procedures.models import Procedure


def versions(workspace) -> list:
    return list(
        Procedure.objects.filter(workspace=workspace)
        .order_by("name", "version")
        .values_list("name", "version", "is_active", "content")
    )


class ImportRacingFirstCreateTests(TransactionTestCase):
    def setUp(self):
        source = workspace_create(name="Source")
        agent = agent_get_or_create(workspace=source, slug="assistant")
        first = refund(source, agent, "Say sorry, then refund.")
        refund(source, agent, "Say sorry, refund, then follow up.", parent=first)
        # Refund v1 (inactive) and v2 (active) of the agent "assistant".
        self.data = export_bytes(Scope(workspace=source))
        self.target = workspace_create(name="Target")
        self.target_agent = agent_get_or_create(workspace=self.target, slug="assistant")

    def test_an_import_waits_for_a_first_create_of_the_name_and_reports_it(self):
        """The target's first Refund is created in a transaction still open when the import
        starts: the import waits for it, then reuses that v1 and keeps its own v2 inactive,
        exactly as if the create had committed before it began."""
        reports: list[dict] = []
        errors = while_held(
            lambda: refund(self.target, self.target_agent, "Escalate to a human."),
            lambda: reports.append(import_bytes(self.target, self.data)),
        )

        assert errors == []
        (report,) = reports
        assert report["reused"]["procedure"] == 1
        assert report["created"]["procedure"] == 1
        rules = [(c["rule"], c["type"]) for c in report["conflicts"] if c["type"] == "procedure"]
        assert rules == [("reused_existing", "procedure"), ("procedure_kept_inactive", "procedure")]
        assert versions(self.target) == [
            ("Refund", 1, True, "Escalate to a human."),
            ("Refund", 2, False, "Say sorry, refund, then follow up."),
        ]

    def test_a_first_create_waits_for_an_import_of_the_name_and_answers_as_after_it(self):
        """The import of Refund v1 and v2 is still open when the target creates its first
        Refund: the create waits, then answers the 409 it gives once the import committed,
        and the imported versions stay as stored."""
        errors = while_held(
            lambda: import_bytes(self.target, self.data),
            lambda: refund(self.target, self.target_agent, "Escalate to a human."),
        )

        assert [type(e) for e in errors] == [ConflictError]
        assert versions(self.target) == [
            ("Refund", 1, False, "Say sorry, then refund."),
            ("Refund", 2, True, "Say sorry, refund, then follow up."),
        ]
