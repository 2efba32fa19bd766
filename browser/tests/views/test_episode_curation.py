"""Curation of an episode's record on its detail page (issue 13 item 10): trigger, outcome of a
closed episode, error, input and final output through episode_update, inline or as a page."""

import json

from django.test import override_settings

from browser.tests.base import BrowserTestCase
from core.models import AuditEvent
from episodes.models import Episode
from episodes.services import episode_create


class EpisodeRecordEditTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.closed = episode_create(
            workspace=cls.workspace,
            agent=cls.agent,
            trigger_type="chat",
            input={"q": "Where is my order?"},
            outcome="failure",
            error="Timeout calling the CRM",
        )
        cls.open = episode_create(workspace=cls.workspace, agent=cls.agent, trigger_type="cron")
        cls.foreign = episode_create(workspace=cls.other_workspace, agent=cls.outsider_agent)

    def edit_url(self, episode, workspace=None):
        url = self.url("memories:episode-record-edit", pk=episode.pk)
        return url if workspace is None else url.replace(str(self.workspace.pk), str(workspace.pk))

    def data(self, **overrides):
        data = {
            "trigger_type": "chat",
            "outcome": "success",
            "error": "",
            "input": '{"q": "Where is my order #4411?"}',
            "final_output": '{"answer": "It ships today."}',
        }
        return {**data, **overrides}

    def test_detail_offers_the_edit_to_editors_only(self):
        detail = self.url("memories:episode", pk=self.closed.pk)
        for user in (self.owner, self.teammate):
            self.login(user)
            content = self.client.get(detail).content.decode()
            assert 'hx-target="#episode-record"' in content and 'hx-target="#episode-feedback"' in content
        self.login(self.viewer)
        content = self.client.get(detail).content.decode()
        assert 'id="episode-record"' in content and "Edit record" not in content
        assert "Give feedback" not in content

    def test_inline_edit_of_a_closed_episode(self):
        self.login(self.teammate)
        form = self.htmx("get", self.edit_url(self.closed), target="episode-record")
        content = form.content.decode()
        assert "<html" not in content and 'hx-post="' in content and 'name="outcome"' in content
        assert "Timeout calling the CRM" in content and "Where is my order?" in content
        response = self.htmx("post", self.edit_url(self.closed), self.data(), target="episode-record")
        assert response.status_code == 200 and "Saved episode" in response["HX-Trigger"]
        assert b'id="episode-record"' in response.content and b"<html" not in response.content
        episode = Episode.objects.get(pk=self.closed.pk)
        assert episode.outcome == "success" and episode.error == ""
        assert episode.input == {"q": "Where is my order #4411?"}
        assert episode.final_output == {"answer": "It ships today."}
        event = AuditEvent.objects.get(entity_type="episode", entity_id=str(episode.pk), action="update")
        assert event.actor == "operator:teammate"
        assert sorted(event.changes["fields"]) == ["error", "final_output", "input", "outcome"]

    def test_open_episode_has_no_outcome_field(self):
        self.login(self.owner)
        form = self.htmx("get", self.edit_url(self.open), target="episode-record")
        assert b'name="outcome"' not in form.content and b'name="trigger_type"' in form.content
        response = self.htmx(
            "post",
            self.edit_url(self.open),
            {"trigger_type": "webhook", "outcome": "success", "input": "", "final_output": ""},
            target="episode-record",
        )
        assert "Saved episode" in response["HX-Trigger"]
        episode = Episode.objects.get(pk=self.open.pk)
        # Outcome is left to episode_close; an empty input is {} and an empty output null.
        assert (episode.trigger_type, episode.outcome, episode.ended_at) == ("webhook", "", None)
        assert episode.input == {} and episode.final_output is None

    def test_without_javascript_a_page_then_a_redirect(self):
        self.login(self.teammate)
        page = self.client.get(self.edit_url(self.closed))
        assert b"<html" in page.content and b"Edit episode" in page.content
        response = self.client.post(self.edit_url(self.closed), self.data(trigger_type="email"))
        assert response.status_code == 302
        assert response["Location"] == self.url("memories:episode", pk=self.closed.pk)
        assert Episode.objects.get(pk=self.closed.pk).trigger_type == "email"
        assert b"Saved episode." in self.client.get(response["Location"]).content

    def test_hostile_input_shows_the_form_again(self):
        self.login(self.teammate)
        cases = {
            "bad JSON": (self.data(input="{not json"), "This is not valid JSON."),
            "NUL in JSON": (self.data(final_output='{"a": "x\\u0000y"}'), "NUL"),
            "NUL in text": (self.data(error="bad\x00byte"), "Null characters are not allowed."),
            "NaN": (self.data(final_output="NaN"), "NaN and Infinity are not JSON numbers."),
            "too deep": (self.data(input="[" * 5000 + "]" * 5000), "nested deeper than"),
            "huge trigger": (self.data(trigger_type="x" * 10_000), "at most 50 characters"),
            "unknown outcome": (self.data(outcome="maybe"), "Select a valid choice"),
        }
        before = Episode.objects.get(pk=self.closed.pk)
        for name, (data, message) in cases.items():
            with self.subTest(name):
                for target in ("episode-record", None):
                    if target:
                        response = self.htmx("post", self.edit_url(self.closed), data, target=target)
                    else:
                        response = self.client.post(self.edit_url(self.closed), data)
                    # A plain form post answers the refusal's 400 (browser.lib.rendering.refused).
                    assert response.status_code == (200 if target else 400), response.status_code
                    content = response.content.decode()
                    assert message in content, (name, content[:2000])
                    assert 'class="error"' in content and "<form" in content
        after = Episode.objects.get(pk=self.closed.pk)
        assert (after.input, after.final_output, after.error) == (
            before.input,
            before.final_output,
            before.error,
        )

    @override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
    def test_body_over_the_limit_is_a_413(self):
        self.login(self.teammate)
        data = self.data(final_output=json.dumps({"text": "x" * 20_000}))
        response = self.htmx("post", self.edit_url(self.closed), data, target="episode-record")
        assert response.status_code == 413
        assert Episode.objects.get(pk=self.closed.pk).final_output is None

    def test_viewer_gets_403_and_outsider_404(self):
        self.login(self.viewer)
        assert self.client.get(self.edit_url(self.closed)).status_code == 403
        assert self.client.post(self.edit_url(self.closed), self.data()).status_code == 403
        self.login(self.outsider)
        for url in (self.edit_url(self.closed, self.other_workspace), self.edit_url(self.closed)):
            assert self.client.post(url, self.data()).status_code == 404
        # The outsider's own workspace does not reach another workspace's row either.
        self.login(self.teammate)
        assert self.client.post(self.edit_url(self.foreign), self.data()).status_code == 404
        assert Episode.objects.get(pk=self.closed.pk).outcome == "failure"

    def test_feedback_card_on_the_detail_page(self):
        self.login(self.teammate)
        feedback = self.url("memories:episode-edit", pk=self.closed.pk)
        form = self.htmx("get", feedback, target="episode-feedback")
        assert b'hx-target="#episode-feedback"' in form.content and b'name="rating"' in form.content
        response = self.htmx(
            "post", feedback, {"rating": "5", "comment": "Fixed by hand"}, target="episode-feedback"
        )
        assert "Saved feedback" in response["HX-Trigger"]
        assert b'id="episode-feedback"' in response.content and b"Fixed by hand" in response.content
        episode = Episode.objects.get(pk=self.closed.pk)
        assert (episode.rating, episode.feedback_comment) == (5, "Fixed by hand")
        # The list row's inline feedback edit still answers its row.
        row = self.htmx("get", feedback, target=f"row-{self.closed.pk}")
        assert b'class="editing"' in row.content
