"""Closing an episode keeps what was recorded on it, and no given field is dropped."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.services import EPISODE_END_NEEDS_OUTCOME

LIST = "/api/v1/episodes/"


class EpisodeCloseKeepsRecordTests(MemoryTestCase):
    def open_episode(self, **fields):
        response = self.api().post(LIST, {"agent": "assistant", **fields}, format="json")
        assert response.status_code == 201, response.json()
        return response.json()["id"]

    def test_closing_with_the_outcome_only_keeps_the_recorded_output_and_error(self):
        """An output and error recorded while the run was open survive a close that names neither."""
        episode_id = self.open_episode(final_output={"draft": "Booked for 8pm"}, error="slow API")
        closed = self.api().post(f"{LIST}{episode_id}/close/", {"outcome": "success"}, format="json")
        assert closed.status_code == 200, closed.json()
        assert closed.json()["final_output"] == {"draft": "Booked for 8pm"}
        assert closed.json()["error"] == "slow API"
        episode = Episode.objects.get(pk=episode_id)
        assert (episode.final_output, episode.error) == ({"draft": "Booked for 8pm"}, "slow API")

    def test_an_output_patched_before_closing_survives_the_close(self):
        episode_id = self.open_episode()
        patched = self.api().patch(f"{LIST}{episode_id}/", {"final_output": "Table for two"}, format="json")
        assert patched.status_code == 200, patched.json()
        self.api().post(f"{LIST}{episode_id}/close/", {"outcome": "failure"}, format="json")
        assert Episode.objects.get(pk=episode_id).final_output == "Table for two"

    def test_values_given_to_close_still_replace_the_recorded_ones(self):
        """Naming final_output (even null) or error in the close replaces them."""
        episode_id = self.open_episode(final_output="draft", error="slow")
        body = {"outcome": "success", "final_output": None, "error": ""}
        closed = self.api().post(f"{LIST}{episode_id}/close/", body, format="json")
        assert (closed.json()["final_output"], closed.json()["error"]) == (None, "")

    def test_ended_at_without_an_outcome_is_refused(self):
        """An end time given to an open episode was silently dropped; now it is a 400 naming
        ended_at, and nothing is written."""
        before = Episode.objects.count()
        ended = (timezone.now() - timedelta(minutes=1)).isoformat()
        response = self.api().post(LIST, {"agent": "assistant", "ended_at": ended}, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["fields"] == {"ended_at": [EPISODE_END_NEEDS_OUTCOME]}
        assert Episode.objects.count() == before
