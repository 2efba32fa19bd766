from core.errors import ApplicationError
from core.testing import MemoryTestCase
from procedures import services
from procedures.services import trigger_conditions_validate


class TriggerConditionsTests(MemoryTestCase):
    def test_phrases_are_normalized_to_lists(self):
        cleaned = trigger_conditions_validate(
            {"goal_contains": " deploy ", "channels": ["slack"], "context": {"a": 1}}
        )
        assert cleaned == {"goal_contains": ["deploy"], "channels": ["slack"], "context": {"a": 1}}
        assert trigger_conditions_validate(None) == {}

    def test_bad_conditions_are_refused(self):
        cases = [
            ([], services.TRIGGER_NOT_OBJECT),
            ({"when": "x"}, "Unknown condition 'when'."),
            ({"goal_contains": [""]}, "'goal_contains' is a list of non-empty strings."),
            ({"agents": [1]}, "'agents' is a list of non-empty strings."),
            ({"context": ["x"]}, services.TRIGGER_CONTEXT),
        ]
        for conditions, message in cases:
            with self.assertRaisesMessage(ApplicationError, message):
                trigger_conditions_validate(conditions)
