"""An import holds the learned signatures (agent, learned_signature) it brings like its
lineages, so a learning pass proposing the signature while the import runs is waited for and
then reused, never a refused insert that fails the whole file."""

from django.test import TransactionTestCase

from core.errors import ConflictError
from core.services import agent_get_or_create, workspace_create
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes, while_held
from procedures.models import Procedure
from procedures.services import PROCEDURE_SIGNATURE_TAKEN, procedure_create

SIGNATURE = "chat|goal:order refund"


def create(workspace, agent, name, **extra):
    return procedure_create(
        workspace=workspace, agent=agent, name=name, procedure_type="prompt_template", content=name, **extra
    )


class ImportLearnedSignatureRaceTests(TransactionTestCase):
    def setUp(self):
        source = workspace_create(name="Source")
        source_agent = agent_get_or_create(workspace=source, slug="assistant")
        create(source, source_agent, "Refund", learned_signature=SIGNATURE)
        self.data = export_bytes(Scope(workspace=source))
        self.target = workspace_create(name="Target")
        self.agent = agent_get_or_create(workspace=self.target, slug="assistant")

    def rows(self) -> list:
        return list(
            Procedure.objects.filter(workspace=self.target)
            .order_by("name")
            .values_list("name", "learned_signature")
        )

    def test_an_import_waits_for_a_proposal_of_its_signature_and_reuses_it(self):
        """A learning pass proposes the file's signature under another name in a transaction
        still open when the import starts: the import waits, then reuses the proposal as it
        reuses a stored procedure of the same name (no `row_refused` for the whole file)."""
        reports: list[dict] = []
        errors = while_held(
            lambda: create(self.target, self.agent, "Learned: order refund", learned_signature=SIGNATURE),
            lambda: reports.append(import_bytes(self.target, self.data)),
        )

        assert errors == []
        (report,) = reports
        assert report["reused"]["procedure"] == 1
        assert "procedure" not in report["created"]
        (conflict,) = [c for c in report["conflicts"] if c["type"] == "procedure"]
        assert conflict["rule"] == "reused_existing"
        assert conflict["detail"]["learned_signature"] == SIGNATURE
        assert self.rows() == [("Learned: order refund", SIGNATURE)]

    def test_a_proposal_of_the_signature_waits_for_the_import_and_says_it_is_taken(self):
        """The import holding the signature is still open when the proposal is made: the
        proposal waits, then answers the 409 of a signature already held, naming the signature
        (not a name and version), and the imported row stays."""
        errors = while_held(
            lambda: import_bytes(self.target, self.data),
            lambda: create(self.target, self.agent, "Learned: order refund", learned_signature=SIGNATURE),
        )

        assert [type(e) for e in errors] == [ConflictError]
        assert errors[0].message == PROCEDURE_SIGNATURE_TAKEN
        assert errors[0].fields == {"learned_signature": [PROCEDURE_SIGNATURE_TAKEN]}
        assert self.rows() == [("Refund", SIGNATURE)]
