from datetime import timedelta

from django.utils import timezone

from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from identities.tests.factories import MemoryUserFactory, ThreadFactory

LIST = "/api/v1/episodes/"


class EpisodeApiTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.thread = ThreadFactory(agent=cls.agent, memory_user=cls.person)

    def test_open_close_and_feedback(self):
        started = timezone.now() - timedelta(seconds=3)
        created = self.api().post(
            LIST,
            {
                "agent": "assistant",
                "thread": str(self.thread.pk),
                "trigger_type": "telegram_message",
                "trigger_payload": {"text": "book a table"},
                "input": {"goal": "book a table"},
                "actions": [{"tool": "search", "result": "3 places"}],
                "started_at": started.isoformat(),
            },
            format="json",
        )
        assert created.status_code == 201, created.json()
        data = created.json()
        assert data["memory_user"] == str(self.person.pk)
        assert data["ended_at"] is None
        url = f"{LIST}{data['id']}/"
        closed = self.api().post(
            f"{url}close/",
            {"outcome": "success", "final_output": "Booked", "actions": [{"tool": "book", "result": "ok"}]},
            format="json",
        )
        assert closed.status_code == 200, closed.json()
        assert closed.json()["duration_ms"] >= 3000
        assert [a["tool"] for a in closed.json()["actions"]] == ["search", "book"]
        assert self.api().post(f"{url}close/", {"outcome": "failure"}, format="json").status_code == 409
        feedback = self.api().post(f"{url}feedback/", {"rating": 5, "comment": "great"}, format="json")
        assert (feedback.json()["rating"], feedback.json()["feedback_comment"]) == (5, "great")
        assert self.api().post(f"{url}feedback/", {"rating": 6}, format="json").status_code == 400
        assert AuditEvent.objects.filter(entity_type="episode").count() == 3

    def test_bad_input_is_refused_and_nothing_is_written(self):
        other_thread = ThreadFactory(agent=self.other_agent)
        cases = [
            ({"agent": "assistant", "outcome": "meh"}, "outcome"),
            ({"agent": "assistant", "actions": "not a list"}, "actions"),
            ({"agent": "assistant", "thread": str(other_thread.pk)}, "thread"),
            ({"agent": "assistant", "rating": 3}, "rating"),
        ]
        for body, field in cases:
            response = self.api().post(LIST, body, format="json")
            assert response.status_code in (400, 404), (body, response.json())
            assert field in response.json()["error"]["fields"], (body, response.json())
        started = timezone.now()
        backwards = {
            "agent": "assistant",
            "outcome": "success",
            "started_at": started.isoformat(),
            "ended_at": (started - timedelta(seconds=1)).isoformat(),
        }
        assert self.api().post(LIST, backwards, format="json").status_code == 400
        assert not Episode.objects.exists()

    def test_list_filters_and_query_count(self):
        EpisodeFactory(agent=self.agent, memory_user=self.person, outcome="success", ended_at=timezone.now())
        EpisodeFactory(agent=self.agent, outcome="failure", error="timeout", ended_at=timezone.now())
        EpisodeFactory(agent=self.other_agent)
        self.api().get(LIST)  # the key's last_used_at is refreshed once, not per request
        with self.assertNumQueries(2):  # key, page (short: its own total, no count)
            response = self.api().get(LIST)
        assert response.json()["count"] == 3
        assert self.api().get(LIST, {"outcome": "open"}).json()["count"] == 1
        assert self.api().get(LIST, {"outcome": "failure", "q": "timeout"}).json()["count"] == 1
        assert self.api().get(LIST, {"memory_user": str(self.person.pk)}).json()["count"] == 1
        assert self.api().get(LIST, {"agent": "researcher"}).json()["count"] == 1
        assert self.api(self.agent_key).get(LIST).json()["count"] == 2

    def test_patch_delete_and_batch_delete(self):
        episodes = [EpisodeFactory(agent=self.agent) for _ in range(3)]
        patched = self.api().patch(f"{LIST}{episodes[0].pk}/", {"error": "edited"}, format="json")
        assert patched.json()["error"] == "edited"
        assert (
            self.api().patch(f"{LIST}{episodes[0].pk}/", {"outcome": "success"}, format="json").status_code
            == 400
        )
        assert self.api().delete(f"{LIST}{episodes[0].pk}/").json()["episodes"] == 1
        foreign = EpisodeFactory(agent=self.outsider_agent)
        refused = self.api().post(
            f"{LIST}batch-delete/", {"ids": [str(episodes[1].pk), str(foreign.pk)]}, format="json"
        )
        assert refused.status_code == 404
        assert Episode.objects.count() == 3
        done = self.api().post(
            f"{LIST}batch-delete/", {"ids": [str(e.pk) for e in episodes[1:]]}, format="json"
        )
        assert done.json() == {"episodes": 2, "facts_unlinked": 0}

    def test_outsider_and_other_agent_keys_get_404(self):
        mine = EpisodeFactory(agent=self.agent)
        theirs = EpisodeFactory(agent=self.other_agent)
        outsider = self.api(self.outsider_key)
        assert outsider.get(f"{LIST}{mine.pk}/").status_code == 404
        assert outsider.post(f"{LIST}{mine.pk}/feedback/", {"rating": 1}, format="json").status_code == 404
        assert outsider.delete(f"{LIST}{mine.pk}/").status_code == 404
        bound = self.api(self.agent_key)
        assert bound.get(f"{LIST}{theirs.pk}/").status_code == 404
        assert (
            bound.post(f"{LIST}{theirs.pk}/close/", {"outcome": "success"}, format="json").status_code == 404
        )
        assert (
            self.api(self.read_only_key)
            .post(f"{LIST}{mine.pk}/feedback/", {"rating": 1}, format="json")
            .status_code
            == 403
        )
