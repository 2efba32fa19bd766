"""Per-workspace daily LLM token budgets (issue 14, Budgets): the ledger is filled from the
provider's usage fields by the real client, and past the budget the policy decides."""

import threading

import pytest
from django.db import connection
from django.test import TransactionTestCase

from core.lib.llm_budget import budget_day, llm_budget_state, llm_usage_days, llm_usage_record
from core.llm import LLMBudgetExceeded, LLMBudgetWait, LLMUnavailable, chat_complete
from core.models import LLMBudget, LLMUsage, Workspace
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import use_test_chat

MESSAGES = [{"role": "user", "content": "one two three four"}]


class LedgerTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_chat(self.server, self.workspace)

    def test_each_call_is_counted_under_its_purpose_from_the_usage_fields(self):
        self.server.chat_replies.extend(["five six", "seven"])
        chat_complete(workspace=self.workspace, messages=MESSAGES, purpose="compaction")
        chat_complete(workspace=self.workspace, messages=MESSAGES, purpose="extraction")
        rows = {r.purpose: r for r in LLMUsage.objects.filter(workspace=self.workspace, day=budget_day())}
        # The test server reports prompt words and reply words, and leaves total_tokens out.
        assert (rows["compaction"].prompt_tokens, rows["compaction"].completion_tokens) == (4, 2)
        assert rows["compaction"].total_tokens == 6 and rows["extraction"].total_tokens == 5
        assert llm_budget_state(workspace=self.workspace).used == 11
        (today,) = llm_usage_days(workspace=self.workspace)
        assert today["total"] == 11 and today["calls"] == 2
        assert not LLMUsage.objects.filter(workspace=self.other_workspace).exists()

    def test_a_provider_total_larger_than_the_parts_is_kept(self):
        llm_usage_record(
            workspace=self.workspace,
            purpose="reflection",
            usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 40},
        )
        llm_usage_record(workspace=self.workspace, purpose="reflection", usage={"prompt_tokens": "x"})
        row = LLMUsage.objects.get(workspace=self.workspace, purpose="reflection")
        assert (row.calls, row.total_tokens) == (2, 40)

    def test_past_a_fallback_budget_the_call_is_refused_as_unavailable(self):
        LLMBudget.objects.create(workspace=self.workspace, daily_tokens=5, policy="fallback")
        chat_complete(workspace=self.workspace, messages=MESSAGES, purpose="compaction")
        with pytest.raises(LLMBudgetExceeded) as refused:
            chat_complete(workspace=self.workspace, messages=MESSAGES, purpose="compaction")
        assert isinstance(refused.value, LLMUnavailable)
        assert len(self.server.requests) == 1
        row = LLMUsage.objects.get(workspace=self.workspace, purpose="compaction")
        assert (row.calls, row.refused) == (1, 1)
        # Another workspace's budget is its own.
        use_test_chat(self.server, self.other_workspace)
        chat_complete(workspace=self.other_workspace, messages=MESSAGES)

    def test_past_a_wait_budget_the_call_says_when_to_retry(self):
        with self.settings(LLM_DAILY_TOKEN_BUDGET=1, LLM_BUDGET_POLICY="wait"):
            chat_complete(workspace=self.workspace, messages=MESSAGES)
            with pytest.raises(LLMBudgetWait) as waiting:
                chat_complete(workspace=self.workspace, messages=MESSAGES)
        assert waiting.value.retry_at == llm_budget_state(workspace=self.workspace).retry_at

    def test_compaction_past_a_fallback_budget_takes_the_extractive_summary(self):
        from threads.services.compaction import thread_summarize
        from threads.tests.factories import make_thread

        LLMBudget.objects.create(workspace=self.workspace, daily_tokens=0)
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        summary, method = thread_summarize(
            thread=thread, previous="", messages=[{"role": "user", "content": "I moved to Porto."}]
        )
        assert method == "extractive" and not self.server.requests


class ConcurrentLedgerTests(TransactionTestCase):
    def test_concurrent_calls_lose_no_count(self):
        """Eight threads record 25 calls each at once, the first ones racing to create the row."""
        workspace = Workspace.objects.create(name="Parallel")

        def record():
            try:
                for _ in range(25):
                    llm_usage_record(
                        workspace=workspace,
                        purpose="extraction",
                        usage={"prompt_tokens": 3, "completion_tokens": 4},
                    )
            finally:
                connection.close()

        threads = [threading.Thread(target=record) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        row = LLMUsage.objects.get(workspace=workspace)
        assert (row.calls, row.total_tokens) == (200, 1400)
