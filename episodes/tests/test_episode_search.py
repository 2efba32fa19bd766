"""episode_search: full-text search over every episode in scope, through the stored vector."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.selectors import episode_search
from episodes.tests.factories import EpisodeFactory


class EpisodeSearchTests(MemoryTestCase):
    def search(self, query, **kwargs):
        return episode_search(workspace=self.workspace, query=query, **kwargs)

    def test_old_episodes_are_found_behind_thousands_of_newer_ones(self):
        """No recency window: an episode two years old behind 5,000 newer ones still matches."""
        old = EpisodeFactory(
            agent=self.agent,
            error="disk quota exceeded on the backup volume",
            started_at=timezone.now() - timedelta(days=730),
        )
        Episode.objects.bulk_create(
            Episode(workspace=self.workspace, agent=self.agent, trigger_type="cron", input={"n": i})
            for i in range(5000)
        )
        assert self.search("quota exceeded") == [old]

    def test_trigger_outranks_input_and_feedback(self):
        """Weights as before: trigger A, input/output/error B, feedback C; ties newest first."""
        by_feedback = EpisodeFactory(agent=self.agent, feedback_comment="the invoice was wrong")
        by_input = EpisodeFactory(agent=self.agent, input={"goal": "send the invoice"})
        by_trigger = EpisodeFactory(agent=self.agent, trigger_type="invoice")
        EpisodeFactory(agent=self.agent, final_output={"text": "nothing relevant"})
        assert self.search("invoice") == [by_trigger, by_input, by_feedback]

    def test_scope_limits_the_search(self):
        """Another agent's and another workspace's episodes never match."""
        EpisodeFactory(agent=self.other_agent, trigger_type="invoice")
        EpisodeFactory(agent=self.outsider_agent, trigger_type="invoice")
        mine = EpisodeFactory(agent=self.agent, trigger_type="invoice")
        assert self.search("invoice", agent=self.agent) == [mine]

    def test_very_large_runs_are_stored_and_searchable(self):
        """A run with megabytes of output is stored (only its beginning is analysed)."""
        huge = " ".join(f"token{i}" for i in range(300_000))
        episode = EpisodeFactory(agent=self.agent, final_output={"text": "needle " + huge})
        assert self.search("needle") == [episode]
