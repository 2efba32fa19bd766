"""Compaction through the fair queue (issue 14, Budgets): one queued compaction per thread and
node however many requests, deferral to the next budget day under a `wait` budget (the clock
is set to see it run), and a retried summarizer failure keeps its job's slot."""

from datetime import timedelta
from unittest import mock

import pytest
from django.test import override_settings

from core.lib.fair_queue import llm_jobs_dispatch, llm_jobs_recover
from core.lib.llm_budget import budget_day, budget_reset_at, llm_usage_record
from core.llm import LLMError
from core.models import Agent, LLMBudget, LLMJob
from core.services import agent_update, provider_credential_set
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from threads.models import NodeSummary, Thread
from threads.services import thread_compact_request
from threads.services.compaction import COMPACTION_REQUEST_TTL, thread_compact_job
from threads.tasks import thread_compact_task
from threads.tests.factories import append, make_thread

CONVERSATION = [
    ("user", "Hi, I am Alice and I live in Lyon."),
    ("assistant", "Nice to meet you, Alice."),
    ("user", "We decided to book flight AF123 on 12 March."),
    ("assistant", "Noted: AF123 on 12 March."),
    ("user", "Should I take the train to Paris instead?"),
    ("assistant", "The train takes 2 hours."),
]


class CompactionQueueTests(MemoryTestCase):
    def setUp(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 2})
        self.agent.refresh_from_db()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(self.thread, *CONVERSATION)

    @override_settings(LLM_JOBS_PER_WORKSPACE=2)
    def test_requests_of_one_thread_and_node_share_one_queued_job(self):
        append(self.thread, ("user", "Sub-agent: searching flights."), node_id="search")
        with mock.patch("core.lib.fair_queue._send"):
            with self.captureOnCommitCallbacks(execute=False):
                for _ in range(3):
                    thread_compact_request(thread=self.thread)
                thread_compact_request(thread=self.thread, node="search")
                thread_compact_request(thread=self.thread, node="search")
            assert LLMJob.objects.count() == 2
            assert sorted(LLMJob.objects.values_list("kwargs__node", flat=True)) == ["", "search"]
            # Sent (running): a new request may need messages the running one does not see.
            with self.captureOnCommitCallbacks(execute=True):
                llm_jobs_dispatch()
            with self.captureOnCommitCallbacks(execute=True):
                thread_compact_request(thread=self.thread)
                thread_compact_request(thread=self.thread)
        assert LLMJob.objects.filter(state="queued").count() == 1
        assert LLMJob.objects.count() == 3

    def test_appends_past_the_threshold_queue_one_compaction_even_after_the_request_ttl(self):
        agent_update(
            agent=self.agent, memory_settings={"model_context_window": 512, "compaction_threshold": 0.5}
        )
        thread = make_thread(workspace=self.workspace, agent=Agent.objects.get(pk=self.agent.pk))
        with mock.patch("core.lib.fair_queue._claim", return_value=None):
            with self.captureOnCommitCallbacks(execute=True):
                append(thread, *[("user", "word " * 60) for _ in range(6)])
            # The request mark expires while the job still waits its turn.
            Thread.objects.filter(pk=thread.pk).update(
                compaction_requested_at=Thread.objects.get(pk=thread.pk).compaction_requested_at
                - COMPACTION_REQUEST_TTL
                - timedelta(seconds=1)
            )
            with self.captureOnCommitCallbacks(execute=True):
                append(thread, ("user", "word " * 60))
        assert LLMJob.objects.filter(kwargs__thread_id=str(thread.pk)).count() == 1


class CompactionWaitBudgetTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        provider_credential_set(workspace=self.workspace, purpose="chat", base_url=self.server.url, model="m")
        agent_update(agent=self.agent, memory_settings={"recent_messages": 2})
        self.agent.refresh_from_db()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(self.thread, *CONVERSATION)

    def spend_the_budget(self):
        LLMBudget.objects.create(workspace=self.workspace, daily_tokens=100, policy="wait")
        llm_usage_record(workspace=self.workspace, purpose="compaction", usage={"prompt_tokens": 150})

    def test_under_wait_a_compaction_is_deferred_to_the_next_budget_day_and_runs_then(self):
        self.spend_the_budget()
        with self.captureOnCommitCallbacks(execute=True):
            thread_compact_request(thread=self.thread)
        thread = Thread.objects.get(pk=self.thread.pk)
        assert thread.summary == "" and "budget" in thread.compaction_error
        job = LLMJob.objects.get()
        reset = budget_reset_at(budget_day())
        assert (job.state, job.not_before) == ("queued", reset)
        assert self.server.requests == []
        # Further requests wait with it instead of queueing more jobs.
        with self.captureOnCommitCallbacks(execute=True):
            thread_compact_request(thread=self.thread)
            llm_jobs_recover()
        assert list(LLMJob.objects.values_list("state", flat=True)) == ["queued"]

        self.server.chat_replies.append("- Alice (Lyon) booked AF123 for 12 March.")
        tomorrow = reset + timedelta(minutes=1)
        with (
            mock.patch("django.utils.timezone.now", return_value=tomorrow),
            self.captureOnCommitCallbacks(execute=True),
        ):
            assert llm_jobs_recover(now=tomorrow)["sent"] == 1
        thread = Thread.objects.get(pk=self.thread.pk)
        assert (thread.summary, thread.summary_method) == ("- Alice (Lyon) booked AF123 for 12 March.", "llm")
        assert thread.compaction_error == ""
        assert LLMJob.objects.get().state == "done"

    def test_a_node_compaction_is_deferred_the_same_way(self):
        append(self.thread, *CONVERSATION, node_id="search")
        self.spend_the_budget()
        with self.captureOnCommitCallbacks(execute=True):
            thread_compact_request(thread=self.thread, node="search")
        job = LLMJob.objects.get()
        assert (job.state, job.kwargs["node"]) == ("queued", "search") and job.not_before is not None
        assert "budget" in NodeSummary.objects.get(thread=self.thread, node_id="search").compaction_error

    def test_a_failed_summarizer_keeps_the_jobs_slot_until_its_last_retry(self):
        with mock.patch("core.lib.fair_queue._send"), self.captureOnCommitCallbacks(execute=True):
            thread_compact_request(thread=self.thread)
        job = LLMJob.objects.get()
        assert job.state == "sent"
        self.server.fail_next = 2
        with pytest.raises(LLMError):
            thread_compact_job(thread_id=str(self.thread.pk), llm_job_id=job.pk, retries_left=1)
        assert LLMJob.objects.get().state == "sent"
        with pytest.raises(LLMError):
            thread_compact_job(thread_id=str(self.thread.pk), llm_job_id=job.pk, retries_left=0)
        assert LLMJob.objects.get().state == "done"
        # A late retry of the finished job does nothing.
        assert thread_compact_task.apply(
            kwargs={"thread_id": str(self.thread.pk), "llm_job_id": job.pk}
        ).get() == ("skipped")
