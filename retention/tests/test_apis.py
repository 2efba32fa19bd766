"""The retention API: rules, preview and runs; workspace keys only."""

from datetime import timedelta

from django.utils import timezone

from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from retention.models import RetentionRule, RetentionRun
from retention.services import RULE_NEEDS_A_LIMIT

URL = "/api/v1/retention/"
RULES = URL + "rules/"
RUNS = URL + "runs/"


class RetentionApiTests(MemoryTestCase):
    def test_a_rule_is_set_replaced_read_and_removed(self):
        response = self.api().post(RULES, {"tier": "episodes", "max_age_days": 30}, format="json")
        assert response.status_code == 200, response.json()
        rule = response.json()
        assert (rule["tier"], rule["agent"], rule["max_age_days"], rule["keep_latest"]) == (
            "episodes",
            None,
            30,
            None,
        )
        replaced = (
            self.api()
            .post(RULES, {"tier": "episodes", "max_age_days": None, "keep_latest": 5}, format="json")
            .json()
        )
        assert replaced["id"] == rule["id"] and (replaced["max_age_days"], replaced["keep_latest"]) == (
            None,
            5,
        )
        agent_rule = self.api().post(
            RULES, {"tier": "episodes", "agent": self.agent.slug, "max_age_days": 7}, format="json"
        )
        assert agent_rule.status_code == 200 and agent_rule.json()["agent"] == self.agent.slug
        assert RetentionRule.objects.count() == 2

        body = self.api(self.read_only_key).get(URL).json()
        assert {(r["tier"], r["agent"]) for r in body["rules"]} == {
            ("episodes", None),
            ("episodes", "assistant"),
        }
        assert set(body["preview"]["deletes"]) == {
            "threads",
            "messages",
            "checkpoints",
            "run_snapshots",
            "episodic_entries",
            "episodes",
            "facts",
        }
        assert self.api().delete(f"{RULES}{rule['id']}/").status_code == 204
        assert RetentionRule.objects.count() == 1
        changes = AuditEvent.objects.filter(entity_type="retention_rule").values_list("action", flat=True)
        assert sorted(changes) == ["create", "create", "delete", "update"]

    def test_the_preview_counts_what_the_run_deletes(self):
        self.api().post(RULES, {"tier": "episodes", "max_age_days": 30}, format="json")
        old = [EpisodeFactory(agent=self.agent) for _ in range(3)]
        Episode.objects.filter(pk__in=[e.pk for e in old]).update(
            created_at=timezone.now() - timedelta(days=31)
        )
        EpisodeFactory(agent=self.agent)
        assert self.api().get(URL).json()["preview"]["deletes"]["episodes"] == 3
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().post(RUNS)
        assert response.status_code == 202, response.json()
        run = RetentionRun.objects.get()
        assert (run.state, run.deleted) == ("done", {"episodes": 3})
        assert run.trigger.startswith("api_key:")
        runs = self.api().get(RUNS).json()
        assert runs["runs"][0]["deleted"] == {"episodes": 3} and runs["runs"][0]["state"] == "done"
        assert Episode.objects.count() == 1

    def test_a_run_while_one_runs_is_a_409(self):
        RetentionRun.objects.create(workspace=self.workspace)
        response = self.api().post(RUNS)
        assert response.status_code == 409 and response.json()["error"]["code"] == "retention_running"

    def test_bad_rules_are_400s_and_store_nothing(self):
        for body in (
            {"tier": "episodes"},
            {"tier": "episodes", "max_age_days": None, "keep_latest": None},
            {"tier": "episodes", "max_age_days": 0},
            {"tier": "episodes", "max_age_days": -3},
            {"tier": "episodes", "max_age_days": None, "keep_latest": "many"},
            {"tier": "episodes", "keep_latest": 5},
            {"tier": "nothing", "max_age_days": 3},
            {"tier": "episodes", "max_age_days": 3, "agent": "nobody"},
            {"tier": "episodes", "max_age_days": 3, "agent": "bad slug!"},
            {"tier": "episodes", "max_age_days": 3, "extra": 1},
            {"tier": ["episodes"], "max_age_days": 3},
        ):
            response = self.api().post(RULES, body, format="json")
            assert response.status_code == 400, (body, response.json())
            assert set(response.json()["error"]) == {"code", "message", "fields"}
        response = self.api().post(RULES, {"tier": "episodes", "max_age_days": None}, format="json")
        assert response.json()["error"]["message"] == RULE_NEEDS_A_LIMIT
        # Another workspace's agent is as unknown as a made-up one.
        response = self.api().post(
            RULES,
            {"tier": "episodes", "max_age_days": 3, "agent": self.outsider_agent.slug + "x"},
            format="json",
        )
        assert response.status_code == 400
        assert not RetentionRule.objects.exists()

    def test_agent_bound_read_only_and_outside_keys(self):
        rule = RetentionRule.objects.create(workspace=self.workspace, tier="facts", max_age_days=3)
        for method, url, body in (
            ("get", URL, None),
            ("post", RULES, {"tier": "facts", "max_age_days": 3}),
            ("delete", f"{RULES}{rule.pk}/", None),
            ("get", RUNS, None),
            ("post", RUNS, None),
        ):
            response = getattr(self.api(self.agent_key), method)(url, body, format="json")
            assert response.status_code == 403, (method, url, response.json())
        assert (
            self.api(self.read_only_key)
            .post(RULES, {"tier": "facts", "max_age_days": 3}, format="json")
            .status_code
            == 403
        )
        assert self.api(self.read_only_key).post(RUNS).status_code == 403
        assert self.api(self.outsider_key).delete(f"{RULES}{rule.pk}/").status_code == 404
        assert self.api(self.outsider_key).get(URL).json()["rules"] == []
        assert RetentionRule.objects.filter(pk=rule.pk).exists()
