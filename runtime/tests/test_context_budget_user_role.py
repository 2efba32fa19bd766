"""The budget with `system_as=user`: the blocks travel as a user message whose overhead the
budget must hold, so the message is never dropped whole to keep the invariant."""

from django.urls import reverse

from core.lib.tokens import count_tokens
from core.testing import MemoryTestCase
from runtime.selectors import chat_message_tokens
from runtime.tests.factories import conversation, person, user_fact

URL = reverse("api:runtime:context")
ALL_TO_PROFILE = {"user_profile": 1.0, "session_memory": 0.0, "memory": 0.0, "procedures": 0.0}


class SystemAsUserBudgetTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")
        cls.thread = conversation(cls.workspace, cls.agent, cls.person, turns=4)
        for index in range(60):
            user_fact(cls.workspace, cls.person, f"hobby_{index}", f"hobby number {index} " * 4)

    def test_the_blocks_message_is_cut_at_items_never_dropped_whole(self):
        """Before: with the shares summing to 1 a profile filling its cap plus the message's
        overhead passed the budget, and the last guard removed the whole context message
        (150 tokens: no profile sent at all, while `user_profile` still listed its items)."""
        for budget in range(120, 420, 10):
            body = {
                "agent": "assistant",
                "thread": str(self.thread.pk),
                "message": "hello there",
                "token_budget": budget,
                "system_as": "user",
                "allocation": ALL_TO_PROFILE,
            }
            data = self.api().post(URL, body, format="json").json()
            messages = data["history"]["messages"]
            with self.subTest(budget=budget):
                assert data["user_profile"]["text"], "the profile fits at these budgets"
                assert messages and messages[0]["id"] == f"context-{self.thread.pk}"
                assert messages[0]["content"] == data["user_profile"]["text"]
                sent = sum(chat_message_tokens(m) for m in messages) + data["message_tokens"]
                assert sent == data["tokens"] <= budget

    def test_system_mode_total_counts_the_prompt_as_sent(self):
        """The system prompt recounted as one text stays within the budget (block joins)."""
        for budget in (100, 250, 600, 1500):
            body = {"agent": "assistant", "thread": str(self.thread.pk), "message": "hi"}
            body["token_budget"] = budget
            data = self.api().post(URL, body, format="json").json()
            history = sum(chat_message_tokens(m) for m in data["history"]["messages"])
            with self.subTest(budget=budget):
                assert count_tokens(data["system_prompt"]) + history + data["message_tokens"] <= budget
