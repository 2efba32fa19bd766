"""Hostile input on every retention route answers a clear 4xx with an error code."""

import uuid

from core.testing import MemoryTestCase
from retention.models import RetentionRule

URL = "/api/v1/retention/"
RULES = URL + "rules/"
RUNS = URL + "runs/"


class RetentionHostileInputTests(MemoryTestCase):
    def assert_error(self, response, status):
        assert response.status_code == status, (response.status_code, response.content[:300])
        assert response.json()["error"]["code"], response.json()

    def test_rule_bodies(self):
        bodies = [
            [],
            "text",
            {},
            {"tier": "nope", "max_age_days": 3},
            {"tier": ["facts"], "max_age_days": 3},
            {"tier": "facts"},
            {"tier": "facts", "max_age_days": None},
            {"tier": "facts", "max_age_days": None, "keep_latest": None},
            {"tier": "facts", "max_age_days": 0},
            {"tier": "facts", "max_age_days": -1},
            {"tier": "facts", "max_age_days": 10**20},
            {"tier": "facts", "max_age_days": "ten"},
            {"tier": "facts", "max_age_days": 1.5},
            {"tier": "facts", "max_age_days": True},
            {"tier": "facts", "max_age_days": None, "keep_latest": 0},
            {"tier": "facts", "max_age_days": None, "keep_latest": {"a": 1}},
            {"tier": "facts", "max_age_days": 3, "agent": "no such agent"},
            {"tier": "facts", "max_age_days": 3, "agent": "x" * 500},
            {"tier": "facts", "max_age_days": 3, "agent": ["assistant"]},
            {"tier": "facts", "max_age_days": 3, "extra": 1},
            {"tier": "facts\x00", "max_age_days": 3},
        ]
        for body in bodies:
            self.assert_error(self.api().post(RULES, body, format="json"), 400)
        malformed = self.api().post(RULES, "{not json", content_type="application/json")
        self.assert_error(malformed, 400)
        assert not RetentionRule.objects.exists()

    def test_rule_ids_and_keys(self):
        theirs = RetentionRule.objects.create(workspace=self.other_workspace, tier="facts", max_age_days=3)
        for rule_id in (uuid.uuid4(), theirs.pk):
            self.assert_error(self.api().delete(f"{RULES}{rule_id}/"), 404)
        assert self.api().delete(f"{RULES}not-a-uuid/").status_code == 404
        assert RetentionRule.objects.filter(pk=theirs.pk).exists()

        mine = RetentionRule.objects.create(workspace=self.workspace, tier="facts", max_age_days=3)
        agent_key = self.agent_key
        for method, url in (("get", URL), ("get", RUNS), ("post", RUNS), ("delete", f"{RULES}{mine.pk}/")):
            self.assert_error(getattr(self.api(agent_key), method)(url), 403)
        self.assert_error(
            self.api(agent_key).post(RULES, {"tier": "facts", "max_age_days": 3}, format="json"), 403
        )
        for method, url in (("post", RUNS), ("delete", f"{RULES}{mine.pk}/")):
            self.assert_error(getattr(self.api(self.read_only_key), method)(url), 403)
        self.assert_error(self.client.get(URL), 401)
        assert RetentionRule.objects.filter(pk=mine.pk).exists()
