from django.test import SimpleTestCase

from core.holdings import holdings


class HoldingsOrderTests(SimpleTestCase):
    def test_tiers_register_bottom_up(self):
        """Erasure runs in reverse registration order, so a holding that joins through
        another's rows (messages and session facts through their thread) must be registered
        after it: INSTALLED_APPS lists the tiers bottom-up."""
        labels = [h.label for h in holdings()]
        assert labels.index("threads") < labels.index("messages")
        assert labels.index("threads") < labels.index("facts")
        assert labels.index("episodes") < labels.index("episodic_entries")

    def test_statistics_are_declared_once(self):
        statistics = [h.statistic for h in holdings() if h.statistic]
        assert sorted(statistics) == ["message_count", "thread_count"]
