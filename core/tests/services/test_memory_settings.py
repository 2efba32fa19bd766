import pytest
from django.core.exceptions import ValidationError

from core.memory_settings import memory_settings_for, memory_settings_validate
from core.services import agent_update
from core.testing import MemoryTestCase


class MemorySettingsTests(MemoryTestCase):
    def test_defaults_are_documented_values(self):
        values = memory_settings_for(None)
        assert values.recent_messages == 20
        assert values.token_limit == 2000
        assert values.compaction_threshold == 0.5
        assert values.auto_inject_top_k == 12
        assert values.dedupe_threshold == 0.86

    def test_agent_overrides_win(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 5, "semantic_recall": True})
        values = memory_settings_for(self.agent)
        assert values.recent_messages == 5
        assert values.semantic_recall is True
        assert values.token_limit == 2000

    def test_validation_reports_every_bad_key(self):
        with pytest.raises(ValidationError) as info:
            memory_settings_validate({"token_limit": 1, "dedupe_threshold": "high", "what": 1})
        assert set(info.value.error_dict) == {"token_limit", "dedupe_threshold", "what"}
