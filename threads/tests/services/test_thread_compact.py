import threading

import pytest
from django.db import connection
from django.test import TransactionTestCase, override_settings

from core.llm import LLMError
from core.models import Agent
from core.services import agent_get_or_create, agent_update, provider_credential_set, workspace_create
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from threads.models import Thread
from threads.selectors import message_history_window
from threads.services import thread_compact
from threads.tests.factories import append, make_thread

CONVERSATION = [
    ("user", "Hi, I am Alice and I live in Lyon."),
    ("assistant", "Nice to meet you, Alice."),
    ("user", "We decided to book flight AF123 on 12 March."),
    ("assistant", "Noted: AF123 on 12 March."),
    ("user", "nice weather today"),
    ("assistant", "Indeed."),
    ("user", "Should I take the train to Paris instead?"),
    ("assistant", "The train takes 2 hours."),
]


class CompactionTests(MemoryTestCase):
    def setUp(self):
        agent_update(agent=self.agent, memory_settings={"recent_messages": 2})
        self.agent.refresh_from_db()
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.stored = append(self.thread, *CONVERSATION)

    def test_compaction_through_an_openai_compatible_server(self):
        with OpenAITestServer() as server:
            provider_credential_set(workspace=self.workspace, purpose="chat", base_url=server.url, model="m")
            server.chat_replies.append("- Alice (Lyon) booked AF123 for 12 March.")

            assert thread_compact(thread_id=self.thread.pk) == "compacted"

            _path, body = server.requests[0]
            prompt = body["messages"][1]["content"]
            assert "AF123" in prompt and "Alice" in prompt
            # The recent tail is not summarized.
            assert "train takes 2 hours" not in prompt
        thread = Thread.objects.select_related("agent").get(pk=self.thread.pk)
        assert thread.summary == "- Alice (Lyon) booked AF123 for 12 March."
        assert thread.summary_method == "llm"
        assert thread.summary_upto_id == self.stored[5].pk
        window = message_history_window(thread=thread)
        assert window.summary_applied
        assert [m["content"] for m in window.messages[1:]] == [c for _, c in CONVERSATION[6:]]
        # Raw messages stay.
        assert thread.messages.count() == len(CONVERSATION)

    def test_rerun_with_nothing_new_is_idempotent(self):
        assert thread_compact(thread_id=self.thread.pk) == "compacted"
        before = Thread.objects.get(pk=self.thread.pk).summary
        assert thread_compact(thread_id=self.thread.pk) == "up_to_date"
        assert Thread.objects.get(pk=self.thread.pk).summary == before

    def test_extractive_fallback_keeps_names_numbers_decisions_and_questions(self):
        assert thread_compact(thread_id=self.thread.pk) == "compacted"
        thread = Thread.objects.get(pk=self.thread.pk)
        assert thread.summary_method == "extractive"
        assert "Alice" in thread.summary and "Lyon" in thread.summary
        assert "AF123 on 12 March" in thread.summary
        assert "nice weather" not in thread.summary

    def test_summary_is_cumulative(self):
        assert thread_compact(thread_id=self.thread.pk) == "compacted"
        append(
            self.thread,
            ("user", "My budget is 900 euros."),
            ("assistant", "OK."),
            ("user", "thanks"),
            ("assistant", "bye"),
        )
        assert thread_compact(thread_id=self.thread.pk) == "compacted"
        summary = Thread.objects.get(pk=self.thread.pk).summary
        assert "AF123" in summary and "900 euros" in summary

    def test_failure_keeps_the_previous_summary(self):
        Thread.objects.filter(pk=self.thread.pk).update(summary="")
        with OpenAITestServer() as server:
            provider_credential_set(workspace=self.workspace, purpose="chat", base_url=server.url, model="m")
            server.chat_replies.append("first summary")
            assert thread_compact(thread_id=self.thread.pk) == "compacted"
            append(self.thread, ("user", "more 1"), ("assistant", "more 2"), ("user", "more 3"))
            server.fail_next = 1
            with pytest.raises(LLMError):
                thread_compact(thread_id=self.thread.pk)
        thread = Thread.objects.get(pk=self.thread.pk)
        assert thread.summary == "first summary"
        assert "injected failure" in thread.compaction_error or thread.compaction_error
        assert thread.compaction_lease_until is None

    def test_task_schedules_a_retry_with_backoff_when_the_summarizer_fails(self):
        from celery.exceptions import Retry

        from threads.tasks import thread_compact_task

        assert LLMError in thread_compact_task.autoretry_for
        assert thread_compact_task.retry_backoff
        with OpenAITestServer() as server:
            provider_credential_set(workspace=self.workspace, purpose="chat", base_url=server.url, model="m")
            server.fail_next = 1
            server.chat_replies.append("after retry")
            with pytest.raises(Retry):
                thread_compact_task.delay(str(self.thread.pk))
            assert Thread.objects.get(pk=self.thread.pk).summary == ""
            # The retried run succeeds.
            thread_compact_task.delay(str(self.thread.pk))
        assert Thread.objects.get(pk=self.thread.pk).summary == "after retry"

    def test_compact_api_queues_and_returns_202(self):
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().post(f"/api/v1/threads/{self.thread.pk}/compact/")
        assert response.status_code == 202
        assert Thread.objects.get(pk=self.thread.pk).summary
        assert (
            self.api(self.outsider_key).post(f"/api/v1/threads/{self.thread.pk}/compact/").status_code == 404
        )

    def test_passing_the_threshold_enqueues_one_compaction_on_commit(self):
        agent_update(
            agent=self.agent, memory_settings={"model_context_window": 512, "compaction_threshold": 0.5}
        )
        thread = make_thread(workspace=self.workspace, agent=Agent.objects.get(pk=self.agent.pk))
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            append(thread, *[("user", "word " * 60) for _ in range(6)])
        assert len(callbacks) == 1
        with self.captureOnCommitCallbacks(execute=False) as more:
            append(thread, ("user", "word " * 60))
        # Already requested: not enqueued again.
        assert len(more) == 0


@override_settings(THREADS_SUMMARY_MAX_TOKENS=500)
class CompactionRaceTests(TransactionTestCase):
    def test_two_compactions_racing_produce_one_summary(self):
        workspace = workspace_create(name="Race")
        agent = agent_get_or_create(workspace=workspace, slug="racer")
        agent_update(agent=agent, memory_settings={"recent_messages": 2})
        thread = make_thread(workspace=workspace, agent=agent)
        append(thread, *CONVERSATION)
        results = []
        with OpenAITestServer() as server:
            provider_credential_set(workspace=workspace, purpose="chat", base_url=server.url, model="m")
            server.delay_seconds = 0.5
            server.chat_handler = lambda body: "the one summary"

            def run():
                try:
                    results.append(thread_compact(thread_id=thread.pk))
                finally:
                    connection.close()

            workers = [threading.Thread(target=run) for _ in range(2)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            calls = len(server.requests)
        assert sorted(results) == ["compacted", "locked"]
        assert calls == 1
        assert Thread.objects.get(pk=thread.pk).summary == "the one summary"


class CompactionAcrossBranchesTests(MemoryTestCase):
    def test_a_regeneration_before_the_summary_gets_a_fresh_summary(self):
        """A summary of an abandoned branch is replaced, not extended, by the new branch's."""
        agent_update(agent=self.agent, memory_settings={"recent_messages": 2})
        thread = make_thread(workspace=self.workspace, agent=Agent.objects.get(pk=self.agent.pk))
        stored = append(thread, *CONVERSATION)
        assert thread_compact(thread_id=thread.pk) == "compacted"
        append(
            thread,
            {"role": "assistant", "content": "Another take: Bob from Oslo.", "parent": str(stored[0].pk)},
            ("user", "We agreed on 7 tickets."),
            ("assistant", "Seven it is."),
            ("user", "ok"),
            ("assistant", "fine"),
        )
        assert thread_compact(thread_id=thread.pk) == "compacted"
        summary = Thread.objects.get(pk=thread.pk).summary
        assert "7 tickets" in summary
        assert "AF123" not in summary


class ResolveRaceTests(TransactionTestCase):
    def test_concurrent_resolves_of_one_conversation_create_one_thread(self):
        from threads.services import thread_resolve

        workspace = workspace_create(name="Resolve race")
        agent = agent_get_or_create(workspace=workspace, slug="racer")
        barrier = threading.Barrier(4)
        ids = []

        def run():
            try:
                barrier.wait()
                ids.append(thread_resolve(workspace=workspace, agent=agent, channel_chat_id="chat-1").pk)
            finally:
                connection.close()

        workers = [threading.Thread(target=run) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert len(set(ids)) == 1
        assert Thread.objects.filter(workspace=workspace).count() == 1
