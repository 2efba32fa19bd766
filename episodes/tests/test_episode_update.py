"""episode_update, the one service behind PATCH /api/v1/episodes/{id}/ and the /memories
record edit: the outcome of a closed episode may be corrected, an open one's may not."""

import pytest

from core.errors import ApplicationError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.services import (
    EPISODE_OUTCOME_OPEN,
    EPISODE_OUTCOME_UNKNOWN,
    episode_close,
    episode_create,
    episode_update,
)


class EpisodeUpdateTests(MemoryTestCase):
    def setUp(self):
        self.episode = episode_create(workspace=self.workspace, agent=self.agent, trigger_type="chat")

    def test_corrects_the_outcome_of_a_closed_episode(self):
        episode_close(episode=self.episode, outcome="failure", error="Timeout")
        episode = Episode.objects.get(pk=self.episode.pk)
        episode = episode_update(episode=episode, actor="operator:ada", outcome="success", error="")
        stored = Episode.objects.get(pk=episode.pk)
        assert (stored.outcome, stored.error) == ("success", "")
        assert stored.ended_at is not None and stored.duration_ms is not None
        event = AuditEvent.objects.get(entity_type="episode", action="update", actor="operator:ada")
        assert sorted(event.changes["fields"]) == ["error", "outcome"]

    def test_open_episode_gets_its_outcome_only_by_closing(self):
        with pytest.raises(ApplicationError) as caught:
            episode_update(episode=self.episode, actor="t", outcome="success")
        assert caught.value.fields == {"outcome": [EPISODE_OUTCOME_OPEN]}
        # Sending the outcome it already has (none) is not a change.
        episode_update(episode=self.episode, actor="t", outcome="", trigger_type="cron")
        assert Episode.objects.get(pk=self.episode.pk).trigger_type == "cron"

    def test_unknown_or_cleared_outcome_is_refused(self):
        episode_close(episode=self.episode, outcome="success")
        episode = Episode.objects.get(pk=self.episode.pk)
        for value in ("maybe", ""):
            with self.subTest(value):
                with pytest.raises(ApplicationError) as caught:
                    episode_update(episode=episode, actor="t", outcome=value)
                assert caught.value.fields == {"outcome": [EPISODE_OUTCOME_UNKNOWN]}
        assert Episode.objects.get(pk=episode.pk).outcome == "success"

    def test_api_patch_still_refuses_the_outcome(self):
        """The REST API's PATCH keeps its own fields; the outcome is closed through /close/."""
        response = self.api().patch(
            f"/api/v1/episodes/{self.episode.pk}/", {"outcome": "success"}, format="json"
        )
        assert response.status_code == 400
        assert Episode.objects.get(pk=self.episode.pk).outcome == ""
