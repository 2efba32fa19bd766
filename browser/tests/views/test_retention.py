"""The Retention page (issue 14): rules, the preview of the next run, legal holds, runs."""

from datetime import timedelta

from django.utils import timezone

from browser.tests.base import BrowserTestCase
from browser.views.retention import PERSON_UNKNOWN
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from identities.models import MemoryUser
from identities.tests.factories import MemoryUserFactory
from retention.models import RetentionRule, RetentionRun


class RetentionPageTests(BrowserTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(
            workspace=self.workspace, canonical_id="telegram:1001", display_name="Ada"
        )

    def test_an_admin_sets_a_rule_and_sees_what_the_next_run_deletes(self):
        page = self.open_as(self.owner, self.url("memories:retention"))
        assert b"The next run deletes nothing." in page.content and b"No rules" in page.content
        old = [EpisodeFactory(agent=self.agent, memory_user=self.ada) for _ in range(3)]
        Episode.objects.filter(pk__in=[e.pk for e in old]).update(
            created_at=timezone.now() - timedelta(days=40)
        )
        response = self.htmx(
            "post", self.url("memories:retention-rule-save"), {"tier": "episodes", "max_age_days": "30"}
        )
        assert response.status_code == 200
        assert b"The next run deletes <strong>3</strong> episodes." in response.content
        rule = RetentionRule.objects.get()
        assert (rule.tier, rule.agent, rule.max_age_days, rule.changed_by) == (
            "episodes",
            None,
            30,
            "operator:owner",
        )
        # An agent's own rule, then its removal.
        self.htmx(
            "post",
            self.url("memories:retention-rule-save"),
            {"tier": "episodes", "agent": self.agent.slug, "keep_latest": "10"},
        )
        agent_rule = RetentionRule.objects.get(agent=self.agent)
        page = self.client.get(self.url("memories:retention"))
        assert b"The next run deletes nothing." in page.content
        self.htmx("post", self.url("memories:retention-rule-remove", rule_id=agent_rule.pk))
        assert not RetentionRule.objects.filter(pk=agent_rule.pk).exists()

        with self.captureOnCommitCallbacks(execute=True):
            response = self.htmx("post", self.url("memories:retention-run"))
        assert response.status_code == 200
        assert RetentionRun.objects.get().deleted == {"episodes": 3}
        # The run is queued after the response; the page shows it once it ran.
        assert b"3 episodes" in self.client.get(self.url("memories:retention")).content

    def test_bad_rules_show_the_form_again_and_store_nothing(self):
        self.login(self.owner)
        for data in (
            {"tier": "episodes"},
            {"tier": "episodes", "max_age_days": "0"},
            {"tier": "episodes", "max_age_days": "x"},
            {"tier": "nothing", "max_age_days": "3"},
            {"tier": "episodes", "max_age_days": "3", "agent": "nobody"},
        ):
            response = self.htmx("post", self.url("memories:retention-rule-save"), data)
            # 200 so that htmx swaps the errors in (htmx 2 swaps no 4xx); a plain post gets 400.
            assert response.status_code == 200, data
            assert b'class="error"' in response.content or b'class="errors"' in response.content
        assert not RetentionRule.objects.exists()

    def test_legal_holds_are_placed_by_id_or_canonical_id_and_released(self):
        self.login(self.owner)
        response = self.htmx(
            "post", self.url("memories:legal-hold-place"), {"person": "telegram:1001", "reason": "Case 114"}
        )
        assert response.status_code == 200 and b"Case 114" in response.content
        assert MemoryUser.objects.get(pk=self.ada.pk).legal_hold_reason == "Case 114"
        unknown = self.htmx(
            "post", self.url("memories:legal-hold-place"), {"person": "nobody", "reason": "r"}
        )
        assert unknown.status_code == 200 and PERSON_UNKNOWN.encode() in unknown.content
        outsider = MemoryUserFactory(workspace=self.other_workspace)
        elsewhere = self.htmx(
            "post", self.url("memories:legal-hold-place"), {"person": str(outsider.pk), "reason": "r"}
        )
        assert elsewhere.status_code == 200 and str(outsider.pk) not in elsewhere.content.decode()
        assert MemoryUser.objects.get(pk=outsider.pk).legal_hold_at is None
        self.htmx("post", self.url("memories:legal-hold-release", memory_user_id=self.ada.pk))
        assert MemoryUser.objects.get(pk=self.ada.pk).legal_hold_at is None

    def test_only_admins_of_the_workspace(self):
        for user, status in ((self.teammate, 403), (self.viewer, 403), (self.outsider, 404)):
            self.login(user)
            assert self.client.get(self.url("memories:retention")).status_code == status, user
            response = self.client.post(
                self.url("memories:retention-rule-save"), {"tier": "episodes", "max_age_days": "3"}
            )
            assert response.status_code == status
        assert not RetentionRule.objects.exists()

    def test_run_now_while_a_run_runs_says_so(self):
        RetentionRun.objects.create(workspace=self.workspace)
        self.login(self.owner)
        response = self.htmx("post", self.url("memories:retention-run"))
        assert response.status_code == 200 and b'data-refusal="retention_running"' in response.content
        assert self.client.post(self.url("memories:retention-run")).status_code == 409
        assert "already running" in response.headers.get("HX-Trigger", "")
