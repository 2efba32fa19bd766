"""procedure_match: the SQL pre-filter on goal phrases never drops a procedure that fires."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.testing import MemoryTestCase
from procedures.models import Procedure
from procedures.selectors import procedure_match
from procedures.tests.factories import ProcedureFactory


class ProcedureMatchPrefilterTests(MemoryTestCase):
    def procedure(self, name, conditions):
        return ProcedureFactory(workspace=self.workspace, name=name, trigger_conditions=conditions)

    def names(self, goal, **kwargs):
        matches = procedure_match(workspace=self.workspace, goal=goal, agent=self.agent, **kwargs)
        return sorted(m.procedure.name for m in matches)

    def test_phrases_match_case_insensitively_and_others_are_left_to_python(self):
        """Mixed-case and non-ASCII phrases fire as Python's lowercase says; conditions without
        goal phrases are still evaluated."""
        self.procedure("upper phrase", {"goal_contains": ["REFUND"]})
        self.procedure("second phrase", {"goal_contains": ["invoice", "Order"]})
        self.procedure("accented", {"goal_contains": ["ÄPFEL"]})
        self.procedure("turkish dotless", {"goal_contains": ["IŞIK"]})
        self.procedure("no goal phrases", {"channels": ["slack"]})
        self.procedure("unrelated", {"goal_contains": ["recipe"]})
        self.procedure("no conditions", {})
        assert self.names("I want a refund for my ORDER", context={"channel": "slack"}) == [
            "no conditions",
            "no goal phrases",
            "second phrase",
            "upper phrase",
        ]
        assert self.names("Äpfel und IŞIK kaufen") == ["accented", "no conditions", "turkish dotless"]

    def test_only_candidates_that_can_fire_are_read(self):
        """Hundreds of procedures whose phrases are absent from the goal never leave the database."""
        ProcedureFactory.create_batch(
            300, workspace=self.workspace, trigger_conditions={"goal_contains": ["never-said"]}
        )
        self.procedure("fires", {"goal_contains": ["refund"]})
        with CaptureQueriesContext(connection) as queries:
            assert self.names("a refund please") == ["fires"]
        candidates = queries[0]["sql"]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM ({candidates}) c")
            assert cursor.fetchone()[0] == 1

    def test_malformed_stored_conditions_do_not_break_matching(self):
        """A non-list goal_contains written around the service is evaluated, not a database error."""
        Procedure.objects.filter(pk=self.procedure("raw", {}).pk).update(
            trigger_conditions={"goal_contains": "refund"}
        )
        assert "raw" in self.names("refund")
