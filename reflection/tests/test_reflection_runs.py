"""Reflection runs through the API (issue 13 item 13): duplicates merged, contradicted memories
retired, profiles refreshed; with the chat model of the local test server, and offline."""

import json
from datetime import timedelta
from unittest import mock

from django.db import IntegrityError
from django.test import override_settings
from django.utils import timezone

from core.lib.llm_budget import budget_day, budget_reset_at
from core.models import AuditEvent, LLMBudget, LLMUsage
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_chat, use_test_embeddings
from facts.models import Fact
from facts.tests.factories import FactFactory
from reflection.models import ReflectionProfile, ReflectionRun
from reflection.services import REFLECTION_ACTOR, reflection_run_step, reflection_start, reflection_sweep

RUNS = "/api/v1/reflection/runs/"
PROFILES = "/api/v1/reflection/profiles/"


def chat_reply(body: dict) -> str:
    system = body["messages"][0]["content"]
    if "compact profile" in system:
        return json.dumps({"profile": "- lives in Porto\n- prefers tea"})
    return json.dumps({"decision": "supersede", "reason": "The person moved: Porto replaces Lisbon."})


class ReflectionRunTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace, display_name="Ada")
        now = timezone.now()
        self.first = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada drinks green tea every morning."
        )
        self.twin = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada drinks green tea every morning."
        )
        self.lisbon = entry_factory(agent=self.agent, memory_user=self.person, content="Ada lives in Lisbon.")
        self.porto = entry_factory(agent=self.agent, memory_user=self.person, content="Ada lives in Porto.")
        for offset, entry in enumerate((self.first, self.twin, self.lisbon, self.porto)):
            EpisodicEntry.objects.filter(pk=entry.pk).update(created_at=now - timedelta(days=10 - offset))
        self.city = FactFactory(
            workspace=self.workspace, scope="user", memory_user=self.person, key="city", value="Porto"
        )
        self.home_city = FactFactory(
            workspace=self.workspace, scope="user", memory_user=self.person, key="home_city", value="porto"
        )
        Fact.objects.filter(pk=self.city.pk).update(valid_from=now - timedelta(days=3))

    def start(self, key=None, **body):
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api(key).post(RUNS, {"agent": "assistant", **body}, format="json")
        assert response.status_code in (200, 201), response.json()
        return response

    def test_an_offline_run_merges_retires_and_refreshes_the_profile(self):
        """Without a chat model the deterministic rules decide, and nothing is deleted."""
        response = self.start()
        assert response.status_code == 201
        run = self.api().get(RUNS + response.json()["id"] + "/").json()
        assert run["state"] == "done" and run["method"] == "offline", run
        assert (run["progress_done"], run["progress_total"], run["percent"]) == (1, 1, 100)
        assert (run["merged"], run["retired"], run["profiles_refreshed"]) == (2, 1, 1)
        assert run["tokens_used"] == 0

        twin = EpisodicEntry.objects.get(pk=self.twin.pk)
        assert twin.status == "superseded" and twin.superseded_by_id == self.first.pk and twin.valid_to
        assert EpisodicEntry.objects.get(pk=self.first.pk).times_confirmed == 1
        lisbon = EpisodicEntry.objects.get(pk=self.lisbon.pk)
        assert lisbon.status == "superseded" and lisbon.superseded_by_id == self.porto.pk
        assert EpisodicEntry.objects.get(pk=self.porto.pk).status == "active"
        home_city = Fact.objects.get(pk=self.home_city.pk)
        assert home_city.valid_to is not None and home_city.superseded_by_id == self.city.pk
        assert EpisodicEntry.objects.count() == 4 and Fact.objects.count() == 2

        decisions = {
            e.entity_id: e.changes for e in AuditEvent.objects.filter(actor=REFLECTION_ACTOR).order_by("id")
        }
        assert set(decisions) == {str(self.twin.pk), str(self.lisbon.pk), str(self.home_city.pk)}
        assert decisions[str(self.twin.pk)]["kind"] == "merge"
        assert decisions[str(self.lisbon.pk)]["decision"] == "supersede"
        assert (
            decisions[str(self.lisbon.pk)]["by"] == "rule"
            and "lisbon -> porto" in (decisions[str(self.lisbon.pk)]["reason"])
        )
        assert all(d["reason"] and d["reflection_run"] == run["id"] for d in decisions.values())

        (profile,) = self.api().get(PROFILES, {"memory_user": str(self.person.pk)}).json()["results"]
        assert profile["method"] == "offline" and profile["agent"] == "assistant"
        assert "- name: Ada" in profile["text"] and "Porto" in profile["text"]
        assert "Lisbon" not in profile["text"]

    def test_entries_waiting_for_review_are_left_to_the_reviewer(self):
        EpisodicEntry.objects.filter(pk__in=[self.twin.pk, self.porto.pk]).update(review="held")
        run = ReflectionRun.objects.get(pk=self.start().json()["id"])
        assert (run.state, run.merged, run.retired) == ("done", 1, 0)
        for pk in (self.twin.pk, self.porto.pk, self.lisbon.pk):
            assert EpisodicEntry.objects.get(pk=pk).status == "active"

    def test_a_second_run_finds_nothing_left_to_merge(self):
        self.start()
        events = AuditEvent.objects.filter(actor=REFLECTION_ACTOR).count()
        second = self.start()
        assert second.status_code == 201
        run = ReflectionRun.objects.get(pk=second.json()["id"])
        assert (run.state, run.merged, run.retired, run.profiles_refreshed) == ("done", 0, 0, 1)
        assert AuditEvent.objects.filter(actor=REFLECTION_ACTOR).count() == events

    def test_with_a_chat_model_the_model_decides_and_its_tokens_are_counted(self):
        use_test_chat(self.server, self.workspace)
        self.server.chat_handler = chat_reply
        run = ReflectionRun.objects.get(pk=self.start().json()["id"])
        assert run.state == "done" and run.method == "llm"
        lisbon = EpisodicEntry.objects.get(pk=self.lisbon.pk)
        assert lisbon.status == "superseded"
        event = AuditEvent.objects.get(actor=REFLECTION_ACTOR, entity_id=str(self.lisbon.pk))
        assert event.changes["by"] == "llm" and event.changes["reason"].startswith("The person moved")
        profile = ReflectionProfile.objects.get(agent=self.agent, memory_user=self.person)
        assert profile.method == "llm" and profile.text == "- lives in Porto\n- prefers tea"
        chats = [body for path, body in self.server.requests if path.endswith("/chat/completions")]
        assert len(chats) >= 2
        ledger = LLMUsage.objects.get(workspace=self.workspace, purpose="reflection", day=budget_day())
        assert ledger.calls == len(chats)
        assert run.tokens_used == ledger.total_tokens > 0
        assert ledger.total_tokens == ledger.prompt_tokens + ledger.completion_tokens

    def test_past_a_fallback_budget_the_run_goes_offline_without_calling_the_model(self):
        use_test_chat(self.server, self.workspace)
        self.server.chat_handler = chat_reply
        LLMBudget.objects.create(workspace=self.workspace, daily_tokens=0, policy="fallback")
        run = ReflectionRun.objects.get(pk=self.start().json()["id"])
        assert (run.state, run.method, run.retired, run.tokens_used) == ("done", "offline", 1, 0)
        assert not [p for p, _ in self.server.requests if p.endswith("/chat/completions")]
        refused = LLMUsage.objects.get(workspace=self.workspace, purpose="reflection")
        assert refused.refused >= 1 and refused.total_tokens == 0

    def test_past_a_wait_budget_the_run_waits_and_the_sweep_resumes_it(self):
        use_test_chat(self.server, self.workspace)
        self.server.chat_handler = chat_reply
        budget = LLMBudget.objects.create(workspace=self.workspace, daily_tokens=0, policy="wait")
        run = ReflectionRun.objects.get(pk=self.start().json()["id"])
        assert run.state == "waiting" and run.progress_done == 0
        assert run.resume_after == budget_reset_at(budget_day())
        assert run.resume_after > timezone.now() >= run.resume_after - timedelta(days=1)
        body = self.api().get(RUNS + str(run.pk) + "/").json()
        assert body["state"] == "waiting" and body["resume_after"]
        # The day rolls over: here the budget is raised and the sweep runs after resume_after.
        budget.daily_tokens = 100_000
        budget.save()
        with self.captureOnCommitCallbacks(execute=True):
            swept = reflection_sweep(now=run.resume_after + timedelta(seconds=1))
        assert swept["resumed"] == 1
        run.refresh_from_db()
        # The test model answers "supersede" to every pair: Lisbon/Porto and city/home_city.
        assert (run.state, run.method, run.retired) == ("done", "llm", 2)

    def test_one_run_per_agent_at_a_time(self):
        first = self.api().post(RUNS, {"agent": "assistant"}, format="json")
        second = self.api().post(RUNS, {"agent": "assistant"}, format="json")
        assert (first.status_code, second.status_code) == (201, 200)
        assert first.json()["id"] == second.json()["id"]
        assert ReflectionRun.objects.filter(agent=self.agent).count() == 1
        assert reflection_run_step(run_id=first.json()["id"]) == "done"
        assert reflection_run_step(run_id=first.json()["id"]) == "finished"

    def test_a_start_whose_concurrent_twin_finished_before_it_was_read_back_starts_its_own(self):
        """Another start won the one-active-run constraint, and its run was done before this
        start read it back: this start queues a run of its own instead of failing."""
        original = ReflectionRun.objects.create
        attempts = []

        def create(**fields):
            attempts.append(fields["agent"])
            if len(attempts) == 1:
                raise IntegrityError('duplicate key value violates unique constraint "one active run"')
            return original(**fields)

        with mock.patch.object(ReflectionRun.objects, "create", side_effect=create):
            run, created = reflection_start(agent=self.agent, trigger="api", actor="test")
        assert created and len(attempts) == 2
        assert list(ReflectionRun.objects.filter(agent=self.agent).values_list("pk", flat=True)) == [run.pk]

    @override_settings(REFLECTION_BATCH=1)
    def test_a_killed_run_continues_where_it_stopped(self):
        other = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        entry_factory(agent=self.agent, memory_user=other, content="Bo plays chess.")
        run_id = self.api().post(RUNS, {"agent": "assistant"}, format="json").json()["id"]
        # A worker took the run, reflected on one person, and died holding its lease.
        with override_settings(REFLECTION_STEP_SECONDS=0):
            assert reflection_run_step(run_id=run_id) == "continued"
        ReflectionRun.objects.filter(pk=run_id).update(
            state="running", lease_until=timezone.now() - timedelta(seconds=1)
        )
        run = ReflectionRun.objects.get(pk=run_id)
        assert (run.progress_done, run.progress_total) == (1, 2)
        with self.captureOnCommitCallbacks(execute=True):
            assert reflection_sweep()["resumed"] == 1
        run.refresh_from_db()
        assert (run.state, run.progress_done, run.profiles_refreshed) == ("done", 2, 2)
        assert (run.merged, run.retired) == (2, 1)

    def test_agent_bound_keys_and_other_workspaces_see_only_their_runs(self):
        mine = self.start(key=self.agent_key, agent="")
        assert mine.json()["agent"] == "assistant"
        other = self.start(agent="researcher")
        listed = self.api(self.agent_key).get(RUNS).json()["results"]
        assert [r["id"] for r in listed] == [mine.json()["id"]]
        assert self.api(self.agent_key).get(RUNS + other.json()["id"] + "/").status_code == 404
        refused = self.api(self.agent_key).post(RUNS, {"agent": "researcher"}, format="json")
        assert refused.status_code == 404
        assert self.api(self.outsider_key).get(RUNS + mine.json()["id"] + "/").status_code == 404
        assert self.api(self.outsider_key).get(RUNS).json()["results"] == []
        assert (
            self.api(self.read_only_key).post(RUNS, {"agent": "assistant"}, format="json").status_code == 403
        )
        assert self.api().post(RUNS, {"agent": "assistant", "extra": 1}, format="json").status_code == 400
        assert self.api().post(RUNS, {"agent": "nobody"}, format="json").status_code == 404
