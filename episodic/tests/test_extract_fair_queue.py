"""Extraction and compaction through the fair queue (issue 14, Budgets).

Fairness is measured with two workspaces: Acme queues a backlog of extractions and
compactions, then Globex queues one of each; the order in which the jobs finish is recorded.
Under a `wait` budget an asynchronous extraction is deferred to the next budget day, not
degraded, and runs whole once the day has rolled over (the clock is set)."""

import json
from datetime import timedelta
from unittest import mock

from django.test import override_settings
from django.urls import reverse

from core.lib.fair_queue import llm_jobs_dispatch, llm_jobs_recover
from core.lib.llm_budget import budget_day, budget_reset_at, llm_usage_record
from core.models import LLMBudget, LLMJob, LLMUsage
from core.services import agent_update
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services.extraction import entry_extract_enqueue
from episodic.tasks import entry_extract_task
from episodic.tests.factories import memory_user_factory, use_test_chat, use_test_embeddings
from threads.models import Thread
from threads.services import thread_compact_request
from threads.tests.factories import append, make_thread

EXTRACT = reverse("api:episodic_entries:extract")
EXTRACTIONS = 12
COMPACTIONS = 6
TOPICS = [
    "dentist appointment for Tuesday",
    "flight AF123 to Lyon",
    "piano lessons with Marta",
    "hotel near Porto harbour",
    "car service at Garage Kern",
    "yoga retreat in Bali",
    "tax advisor call on Friday",
    "concert tickets for Radiohead",
    "vet visit for Rex",
    "kitchen repair by Elektro Voss",
    "Spanish course in Sevilla",
    "wine tasting in Bordeaux",
]

TRANSCRIPT = [
    {"id": "m1", "role": "user", "content": "I signed up for the Berlin marathon in September."},
    {"id": "m2", "role": "assistant", "content": "Good luck with the training!"},
]
CANDIDATE = {
    "content": "Signed up for the Berlin marathon in September.",
    "source": "user_assertion",
    "evidence": "I signed up for the Berlin marathon",
}
CONVERSATION = [
    ("user", "Hi, I am Alice and I live in Lyon."),
    ("assistant", "Nice to meet you, Alice."),
    ("user", "We decided to book flight AF123 on 12 March."),
    ("assistant", "Noted: AF123 on 12 March."),
    ("user", "Should I take the train to Paris instead?"),
    ("assistant", "The train takes 2 hours."),
]


def chat_requests(server) -> list:
    return [body for path, body in server.requests if path.endswith("/chat/completions")]


class ExtractionCompactionFairnessTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        for workspace in (self.workspace, self.other_workspace):
            use_test_embeddings(self.server, workspace)
        self.person = memory_user_factory(self.workspace)
        self.small_person = memory_user_factory(self.other_workspace, canonical_id="mail:1")
        for agent in (self.agent, self.outsider_agent):
            agent_update(agent=agent, memory_settings={"recent_messages": 2})
            agent.refresh_from_db()
        self.busy_threads = []
        for n in range(COMPACTIONS):
            thread = make_thread(workspace=self.workspace, agent=self.agent, title=f"t{n}")
            append(thread, *CONVERSATION)
            self.busy_threads.append(thread)
        self.small_thread = make_thread(workspace=self.other_workspace, agent=self.outsider_agent)
        append(self.small_thread, *CONVERSATION)

    def extract(self, agent, person, n):
        # Distinct turns, so that the similarity dedupe keeps every one.
        said = f"I booked the {TOPICS[n]}."
        transcript = [{"id": f"m{n}", "role": "user", "content": said}]
        candidate = {
            "content": said.replace("I booked", "Booked"),
            "source": "user_assertion",
            "evidence": said,
        }
        entry_extract_enqueue(
            agent=agent, memory_user=person, transcript=transcript, candidates=[candidate], use_llm=False
        )

    @override_settings(LLM_JOBS_PER_WORKSPACE=1)
    def test_the_small_workspaces_jobs_finish_early_not_behind_the_backlog(self):
        with self.captureOnCommitCallbacks(execute=True):
            for n in range(EXTRACTIONS):
                self.extract(self.agent, self.person, n)
            for thread in self.busy_threads:
                thread_compact_request(thread=thread)
            self.extract(self.outsider_agent, self.small_person, 0)
            thread_compact_request(thread=self.small_thread)

        queued = list(LLMJob.objects.order_by("created_at", "id").values_list("workspace__name", flat=True))
        backlog = EXTRACTIONS + COMPACTIONS
        # First in, first out would finish Globex's two jobs last.
        assert queued[backlog:] == ["Globex", "Globex"]
        finished = list(
            LLMJob.objects.filter(state="done")
            .order_by("finished_at", "id")
            .values_list("workspace__name", "task")
        )
        assert len(finished) == backlog + 2
        positions = [i + 1 for i, (name, _) in enumerate(finished) if name == "Globex"]
        print(
            f"fair queue (extraction+compaction): Globex's jobs finished at {positions} of {len(finished)} "
            f"(FIFO: {[backlog + 1, backlog + 2]})"
        )
        assert positions == [2, 4], finished
        # The jobs did their work in both workspaces.
        assert EpisodicEntry.objects.filter(workspace=self.workspace).count() == EXTRACTIONS
        assert EpisodicEntry.objects.filter(workspace=self.other_workspace).count() == 1
        summaries = Thread.objects.filter(pk__in=[t.pk for t in [*self.busy_threads, self.small_thread]])
        assert all(summaries.values_list("summary", flat=True))

    @override_settings(LLM_JOBS_PER_WORKSPACE=2)
    def test_a_workspace_never_has_more_than_its_cap_in_the_broker(self):
        with mock.patch("core.lib.fair_queue._send"), self.captureOnCommitCallbacks(execute=True):
            for n in range(EXTRACTIONS):
                self.extract(self.agent, self.person, n)
            self.extract(self.outsider_agent, self.small_person, 0)
        sent = LLMJob.objects.filter(state="sent")
        assert sorted(sent.values_list("workspace__name", flat=True)) == ["Acme", "Acme", "Globex"]
        assert LLMJob.objects.filter(state="queued", workspace=self.workspace).count() == EXTRACTIONS - 2


class ExtractionWaitBudgetTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        use_test_chat(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "transcript": TRANSCRIPT,
            "candidates": [{**CANDIDATE, "content": "Registered for a marathon in Berlin."}],
            "use_llm": True,
            "sync": False,
        }
        self.server.chat_replies.append(
            json.dumps(
                {
                    "entries": [
                        {
                            "content": "Ada runs the Berlin marathon in September.",
                            "source": "user_assertion",
                            "evidence": "Berlin marathon in September",
                        }
                    ],
                    "facts": [],
                }
            )
        )

    def spend_the_budget(self, policy):
        LLMBudget.objects.create(workspace=self.workspace, daily_tokens=100, policy=policy)
        llm_usage_record(workspace=self.workspace, purpose="extraction", usage={"prompt_tokens": 150})

    def test_under_wait_an_async_extraction_is_deferred_to_the_next_budget_day_and_runs_then(self):
        self.spend_the_budget("wait")
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().post(EXTRACT, self.body, format="json")
        # The documented answer: queued, whatever the budget.
        assert response.status_code == 202 and response.json() == {"status": "queued"}
        # Deferred, not degraded: neither the model's nor the client's candidates are stored.
        assert not EpisodicEntry.objects.exists()
        assert chat_requests(self.server) == []
        job = LLMJob.objects.get()
        reset = budget_reset_at(budget_day())
        assert (job.state, job.not_before, job.sent_at) == ("queued", reset, None)
        assert LLMUsage.objects.get(workspace=self.workspace, purpose="extraction").refused == 1

        # Before the day rolls over nothing is sent, however often the dispatcher runs.
        with self.captureOnCommitCallbacks(execute=True):
            assert llm_jobs_dispatch() == 0
            assert llm_jobs_recover()["sent"] == 0
        assert LLMJob.objects.get().state == "queued"

        tomorrow = reset + timedelta(minutes=3)
        with (
            mock.patch("django.utils.timezone.now", return_value=tomorrow),
            self.captureOnCommitCallbacks(execute=True),
        ):
            assert llm_jobs_recover(now=tomorrow)["sent"] == 1
        assert LLMJob.objects.get().state == "done"
        assert len(chat_requests(self.server)) == 1
        stored = set(EpisodicEntry.objects.values_list("content", "metadata__origin"))
        assert stored == {
            ("Ada runs the Berlin marathon in September.", "llm"),
            ("Registered for a marathon in Berlin.", "client"),
        }
        spent = LLMUsage.objects.get(workspace=self.workspace, purpose="extraction", day=tomorrow.date())
        assert spent.calls == 1

    def test_a_budget_raised_meanwhile_releases_the_deferred_extraction_at_the_next_sweep(self):
        self.spend_the_budget("wait")
        with self.captureOnCommitCallbacks(execute=True):
            self.api().post(EXTRACT, self.body, format="json")
        assert LLMJob.objects.get().not_before is not None
        LLMBudget.objects.filter(workspace=self.workspace).update(daily_tokens=10_000)
        with self.captureOnCommitCallbacks(execute=True):
            swept = llm_jobs_recover()
        assert (swept["released"], swept["sent"]) == (1, 1)
        assert EpisodicEntry.objects.count() == 2

    def test_under_fallback_an_async_extraction_takes_the_offline_method_at_once(self):
        self.spend_the_budget("fallback")
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().post(EXTRACT, self.body, format="json")
        assert response.status_code == 202
        assert LLMJob.objects.get().state == "done"
        assert chat_requests(self.server) == []
        origins = set(EpisodicEntry.objects.values_list("metadata__origin", flat=True))
        assert "client" in origins and "llm" not in origins

    def test_under_wait_a_synchronous_extraction_stores_the_clients_candidates_and_says_why(self):
        self.spend_the_budget("wait")
        response = self.api().post(EXTRACT, {**self.body, "sync": True}, format="json")
        assert response.status_code == 200
        body = response.json()
        assert "budget" in body["llm_error"] and not body["llm_used"]
        assert [e["content"] for e in body["stored"]] == ["Registered for a marathon in Berlin."]
        assert not LLMJob.objects.exists()

    def test_a_redelivered_message_of_a_finished_job_is_skipped(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.api().post(EXTRACT, self.body, format="json")
        job = LLMJob.objects.get()
        assert job.state == "done" and EpisodicEntry.objects.count() == 2
        again = entry_extract_task.apply(kwargs={**job.kwargs, "llm_job_id": job.pk}).get()
        assert again == {"status": "skipped"}
        assert len(chat_requests(self.server)) == 1

    def test_a_message_sent_before_the_fair_queue_is_deferred_as_a_new_job(self):
        self.spend_the_budget("wait")
        result = entry_extract_task.apply(
            args=[str(self.agent.pk), str(self.person.pk), TRANSCRIPT], kwargs={"use_llm": True}
        ).get()
        assert result["status"] == "deferred"
        job = LLMJob.objects.get()
        assert job.state == "queued" and job.kwargs["agent_id"] == str(self.agent.pk)
        assert job.not_before == budget_reset_at(budget_day())
        assert job.task == entry_extract_task.name
