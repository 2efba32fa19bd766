"""Hostile input on every route of the review queue and of reflection: each answers a clear 4xx
with a machine-readable error ({"error": {"code", "message", "fields"}}), never a 500, and
decides nothing."""

from django.urls import reverse

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember

LIST = reverse("api:review:list")
APPROVE = reverse("api:review:approve")
REJECT = reverse("api:review:reject")
MERGE = reverse("api:review:merge")
RUNS = reverse("api:reflection:runs")
PROFILES = reverse("api:reflection:profiles")
UUID = "0b6f1d2c-8a4e-4f55-9c1a-2e7d3b9a6c41"


def item_url(tier, pk):
    return reverse("api:review:item", kwargs={"tier": tier, "item_id": pk})


class HostileInputTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        self.entry = entry_create(
            agent=self.agent, memory_user=self.person, content="Ada keeps bees on her roof.", actor="t"
        ).entry
        self.fact = fact_remember(
            workspace=self.workspace,
            key="favourite_tea",
            value="oolong",
            scope="user",
            agent=self.agent,
            memory_user=self.person,
            source=Fact.Source.API,
        ).fact

    def assert_4xx(self, response, context):
        assert 400 <= response.status_code < 500, (context, response.status_code, response.content[:300])
        error = response.json()["error"]
        assert error["code"] and error["message"], context

    def assert_still_held(self):
        assert EpisodicEntry.objects.get(pk=self.entry.pk).review == "held"
        assert Fact.objects.get(pk=self.fact.pk).review == "held"

    def test_list_filters(self):
        for params in (
            {"offset": "-1"},
            {"offset": "99999999999999999999"},
            {"limit": "abc"},
            {"agent": "x" * 300},
            {"agent": "not a slug!"},
            {"memory_user": "1"},
            {"surprise": "1"},
        ):
            self.assert_4xx(self.api().get(LIST, params), params)

    def test_batch_bodies(self):
        bodies = (
            {},
            [],
            "items",
            {"items": []},
            {"items": "x"},
            {"items": ["x"]},
            {"items": [None]},
            {"items": [{"tier": "entry"}]},
            {"items": [{"tier": "entry", "id": 5}]},
            {"items": [{"tier": "entry", "id": "not-a-uuid"}]},
            {"items": [{"tier": ["entry"], "id": UUID}]},
            {"items": [{"tier": "thread", "id": UUID}]},
            {"items": [{"tier": "entry", "id": str(self.entry.pk), "extra": 1}]},
            {"items": [{"tier": "entry", "id": str(self.entry.pk)}] * 501},
            {"items": [{"tier": "entry", "id": str(self.entry.pk)}], "reason": 5},
            {"items": [{"tier": "entry", "id": str(self.entry.pk)}], "reason": "x" * 2001},
        )
        for url in (APPROVE, REJECT):
            for body in bodies:
                self.assert_4xx(self.api().post(url, body, format="json"), (url, body))
        for body in (
            {"items": [{"tier": "entry", "id": str(self.entry.pk)}]},
            {"items": [{"tier": "entry", "id": str(self.entry.pk), "into": "nope"}]},
            {"items": [{"tier": "entry", "id": str(self.entry.pk), "into": None}]},
        ):
            self.assert_4xx(self.api().post(MERGE, body, format="json"), body)
        self.assert_still_held()

    def test_batch_of_wrong_pairs_reports_each(self):
        response = self.api().post(
            MERGE,
            {
                "items": [
                    {"tier": "entry", "id": str(self.entry.pk), "into": str(self.entry.pk)},
                    {"tier": "fact", "id": str(self.fact.pk), "into": str(self.fact.pk)},
                    {"tier": "fact", "id": str(self.fact.pk), "into": str(self.entry.pk)},
                    {"tier": "entry", "id": str(self.fact.pk), "into": str(self.entry.pk)},
                    {"tier": "procedure", "id": UUID, "into": UUID},
                ]
            },
            format="json",
        )
        assert response.status_code == 200, response.content[:300]
        outcomes = [r["outcome"] for r in response.json()["results"]]
        assert outcomes == ["invalid", "invalid", "invalid", "not_found", "invalid"]
        self.assert_still_held()

    def test_edits(self):
        deep = 1
        for _ in range(200):
            deep = [deep]
        for tier, pk, body in (
            ("entry", self.entry.pk, {"content": ""}),
            ("entry", self.entry.pk, {"content": "   "}),
            ("entry", self.entry.pk, {"content": "\u200b\u200b"}),
            ("entry", self.entry.pk, {"content": 5}),
            ("entry", self.entry.pk, {"content": ["x"]}),
            ("entry", self.entry.pk, {"content": "x" * 100_001}),
            ("entry", self.entry.pk, {"name": "x"}),
            ("entry", self.entry.pk, []),
            ("entry", self.entry.pk, "content"),
            ("fact", self.fact.pk, {"confidence": "NaN"}),
            ("fact", self.fact.pk, {"confidence": "Infinity"}),
            ("fact", self.fact.pk, {"confidence": 2}),
            ("fact", self.fact.pk, {"confidence": "high"}),
            ("fact", self.fact.pk, {"fact_type": "gossip"}),
            ("fact", self.fact.pk, {"fact_type": 7}),
            ("fact", self.fact.pk, {"value": "x" * 200_000}),
            ("fact", self.fact.pk, {"value": {"a": deep}}),
            ("fact", self.fact.pk, {"content": "x"}),
        ):
            response = self.api().patch(item_url(tier, pk), body, format="json")
            self.assert_4xx(response, (tier, body))
        self.assert_still_held()
        self.assert_4xx(self.api().patch(item_url("entry", UUID), {}, format="json"), "missing")
        self.assert_4xx(self.api().get(item_url("procedure", self.entry.pk)), "wrong tier")
        self.assert_4xx(self.api().get(item_url("thread", self.entry.pk)), "unknown tier")
        response = self.api().patch(item_url("thread", self.entry.pk), {}, format="json")
        self.assert_4xx(response, "unknown tier")
        assert self.api().get(f"/api/v1/review/entry/{self.entry.pk}x/").status_code == 404

    def test_reflection_routes(self):
        for body in ({"agent": 5}, {"agent": ["assistant"]}, {"agent": "x" * 300}, [], "x", {"agent": None}):
            self.assert_4xx(self.api().post(RUNS, body, format="json"), body)
        for params in (
            {"state": "sleeping"},
            {"agent": "x" * 300},
        ):
            self.assert_4xx(self.api().get(RUNS, params), params)
        for params in ({"memory_user": "1"}, {"agent": "x" * 300}):
            self.assert_4xx(self.api().get(PROFILES, params), params)
        self.assert_4xx(self.api().get(RUNS + UUID + "/"), "missing run")
        self.assert_4xx(self.api().put(RUNS + UUID + "/", {}, format="json"), "method")
        self.assert_4xx(self.api().delete(RUNS), "method")
        self.assert_4xx(self.api().post(PROFILES, {}, format="json"), "method")
