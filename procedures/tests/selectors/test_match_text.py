"""Goal phrases match whatever the Unicode form, case or spacing of goal and phrase."""

import unicodedata

from core.testing import MemoryTestCase
from procedures.models import Procedure
from procedures.selectors import procedure_match
from procedures.services import procedure_create


class ProcedureMatchTextTests(MemoryTestCase):
    def create(self, name, conditions):
        return procedure_create(
            workspace=self.workspace,
            name=name,
            procedure_type="prompt_template",
            content="x",
            trigger_conditions=conditions,
        )

    def names(self, goal, **kwargs):
        return sorted(
            m.procedure.name
            for m in procedure_match(workspace=self.workspace, goal=goal, agent=self.agent, **kwargs)
        )

    def test_decomposed_accents_match_composed_phrases(self):
        """A goal typed on a system that sends "é" as e + U+0301 matches the phrase "café"."""
        self.create("cafe", {"goal_contains": ["café"]})
        decomposed = unicodedata.normalize("NFD", "Order at the Café")
        assert decomposed != "Order at the Café"
        assert self.names(decomposed) == ["cafe"]

    def test_full_case_folding_matches_sharp_s(self):
        """Case-insensitive means case-folded: "STRASSE" holds the phrase "Straße"."""
        self.create("street", {"goal_contains_all": ["Straße"]})
        assert self.names("NEUE STRASSE 4") == ["street"]

    def test_full_width_letters_match_ascii_phrases(self):
        """A goal in full-width Latin letters (an East Asian keyboard) holds the ASCII phrase."""
        self.create("deploy", {"goal_contains": ["deploy"]})
        assert self.names("ｄｅｐｌｏｙ the site") == ["deploy"]

    def test_a_line_break_in_the_goal_matches_a_space_in_the_phrase(self):
        """Whitespace runs compare as one space, in the goal and in stored phrases."""
        self.create("refund", {"goal_contains": ["refund the order"]})
        spaced = self.create("spaced", {})
        # Stored around the service, as older rows may hold it.
        raw = {"goal_contains": ["refund  THE\torder"]}
        Procedure.objects.filter(pk=spaced.pk).update(trigger_conditions=raw)
        assert self.names("Please refund\nthe   order 4411") == ["refund", "spaced"]

    def test_goal_excludes_uses_the_same_comparison(self):
        """An excluded phrase in another Unicode form or case still blocks the procedure."""
        self.create("no rollback", {"goal_contains": ["deploy"], "goal_excludes": ["Rückgängig"]})
        assert self.names(unicodedata.normalize("NFD", "deploy, dann RÜCKGÄNGIG")) == []
        assert self.names("deploy") == ["no rollback"]

    def test_context_true_is_not_the_number_one(self):
        """Context conditions compare JSON values: true is not 1, "1" is not 1."""
        self.create("beta only", {"context": {"beta": True}})
        self.create("tier one", {"context": {"tier": 1}})
        assert self.names("x", context={"beta": 1, "tier": True}) == []
        assert self.names("x", context={"beta": True, "tier": 1}) == ["beta only", "tier one"]
        assert self.names("x", context={"tier": 1.0}) == ["tier one"]
