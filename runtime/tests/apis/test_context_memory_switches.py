"""Per-agent memory switches and the system prompt as a user message (issue 13 items 2 and 3).

- `memory_settings.conversation_memory` false: /context/ and /history/ send no history and
  say why (`off_reason`); turns are still stored.
- `memory_settings.memory_mode`: what a request naming a node reads (its node's messages or
  the main conversation) when the request does not say (`memory_mode`).
- `memory_settings.episodic_memory` false: every episodic read and write answers 409
  `episodic_disabled`, and the context simply has no `<memory>` block.
- `system_as=user` on /context/: the blocks come as the history's first message, a user
  message whose id is the same every turn, built by the function /history/ uses.
"""

import json

from django.urls import reverse

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, use_test_embeddings
from runtime.tests.factories import conversation, person, user_fact
from threads.models import Message, Thread
from threads.services import thread_append_messages
from threads.tests.factories import append

URL = reverse("api:runtime:context")
AGENT = "/api/v1/agents/assistant/"
ENTRIES = reverse("api:episodic_entries:list")
BATCH = reverse("api:episodic_entries:batch")
EXTRACT = reverse("api:episodic_entries:extract")
SEARCH = reverse("api:episodic_entries:search")


class MemorySwitchTestCase(MemoryTestCase):
    def setUp(self):
        self.person = person(self.workspace, display_name="Ada")
        self.thread = conversation(self.workspace, self.agent, self.person, turns=3)

    def settings(self, **values):
        response = self.api().patch(AGENT, {"memory_settings": values}, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def context(self, key=None, status=200, **body):
        body = {"agent": "assistant", "thread": str(self.thread.pk), "message": "What next?", **body}
        response = self.api(key).post(URL, body, format="json")
        assert response.status_code == status, response.json()
        return response.json()

    def history(self, **params):
        response = self.api().get(f"/api/v1/threads/{self.thread.pk}/history/", params)
        assert response.status_code == 200, response.json()
        return response.json()


class ConversationMemoryTests(MemorySwitchTestCase):
    def test_defaults_are_on_and_node(self):
        effective = self.api().get(AGENT).json()["effective_memory_settings"]
        assert effective["conversation_memory"] is True and effective["memory_mode"] == "node"
        assert self.history()["off_reason"] is None
        assert self.context()["history"]["off_reason"] is None

    def test_off_sends_no_history_says_why_and_still_stores_the_turn(self):
        self.settings(conversation_memory=False)
        stored = Message.objects.filter(thread=self.thread).count()
        body = self.context(append=True, message="Where is my parcel?", idempotency_key="t-1")
        history = body["history"]
        assert history["messages"] == [] and history["message_ids"] == [] and history["tokens"] == 0
        assert history["off_reason"] == "conversation_memory_off"
        # The turn is stored; its tokens are reserved since it is not in a history.
        assert Message.objects.filter(thread=self.thread).count() == stored + 1
        assert body["appended_message"] is not None and body["message_tokens"] > 0
        assert body["tokens"] <= body["token_budget"]
        window = self.history()
        assert window["messages"] == [] and window["off_reason"] == "conversation_memory_off"
        # Back on, the stored turn is there.
        self.settings(conversation_memory=True)
        window = self.history()
        assert window["off_reason"] is None
        assert window["messages"][-1]["content"] == "Where is my parcel?"

    def test_off_keeps_the_other_blocks(self):
        user_fact(self.workspace, self.person, "city", "Lisbon")
        self.settings(conversation_memory=False)
        body = self.context()
        assert "- city: Lisbon" in body["user_profile"]["text"]
        assert body["allocation"]["history"] > 0 and body["history"]["messages"] == []

    def test_bad_values_are_400_naming_the_field(self):
        for values, field in (
            ({"conversation_memory": "yes"}, "conversation_memory"),
            ({"conversation_memory": None}, None),  # null resets, never an error
            ({"memory_mode": "everything"}, "memory_mode"),
            ({"memory_mode": ["node"]}, "memory_mode"),
            ({"memory_mode": 1}, "memory_mode"),
        ):
            response = self.api().patch(AGENT, {"memory_settings": values}, format="json")
            if field is None:
                assert response.status_code == 200
                continue
            assert response.status_code == 400, (values, response.json())
            assert set(response.json()["error"]["fields"]) == {field}
        assert self.api().get(AGENT).json()["memory_settings"] == {}


class MemoryModeTests(MemorySwitchTestCase):
    def setUp(self):
        super().setUp()
        append(self.thread, ("user", "node question"), ("assistant", "node answer"), node_id="planner")

    def contents(self, messages):
        return [m["content"] for m in messages]

    def test_node_mode_reads_and_appends_the_named_node(self):
        body = self.context(node="planner", append=True, message="plan it")
        assert self.contents(body["history"]["messages"]) == ["node question", "node answer", "plan it"]
        assert Message.objects.get(pk=body["appended_message"]).node_id == "planner"
        window = self.history(node="planner")
        assert window["memory_mode"] == "node" and window["node"] == "planner"
        assert self.contents(window["messages"]) == ["node question", "node answer", "plan it"]

    def test_conversation_mode_shares_the_main_conversation(self):
        self.settings(memory_mode="conversation")
        body = self.context(node="planner", append=True, message="plan it")
        messages = self.contents(body["history"]["messages"])
        assert messages[-1] == "plan it" and "node question" not in messages
        assert messages[0].startswith("Question 0")
        assert Message.objects.get(pk=body["appended_message"]).node_id == ""
        window = self.history(node="planner")
        assert window["memory_mode"] == "conversation" and window["node"] is None
        assert self.contents(window["messages"])[-1] == "plan it"

    def test_the_request_overrides_the_agents_mode(self):
        self.settings(memory_mode="conversation")
        body = self.context(node="planner", memory_mode="node")
        assert self.contents(body["history"]["messages"]) == ["node question", "node answer"]
        window = self.history(node="planner", memory_mode="node")
        assert self.contents(window["messages"]) == ["node question", "node answer"]
        self.settings(memory_mode="node")
        window = self.history(node="planner", memory_mode="conversation")
        assert "node question" not in self.contents(window["messages"])

    def test_without_a_node_both_modes_read_the_main_conversation(self):
        for mode in ("node", "conversation"):
            messages = self.contents(self.context(memory_mode=mode)["history"]["messages"])
            assert "node question" not in messages and messages[-1].startswith("Answer 2")

    def test_bad_modes_are_400_naming_the_field(self):
        for value in ("everything", "", "NODE"):
            response = self.api().post(
                URL,
                {"agent": "assistant", "thread": str(self.thread.pk), "memory_mode": value},
                format="json",
            )
            assert response.status_code == 400
            assert set(response.json()["error"]["fields"]) == {"memory_mode"}
            if not value:
                continue  # An empty query parameter is one not sent (DRF), as for every filter.
            response = self.api().get(f"/api/v1/threads/{self.thread.pk}/history/", {"memory_mode": value})
            assert response.status_code == 400
            assert set(response.json()["error"]["fields"]) == {"memory_mode"}


class SystemAsUserTests(MemorySwitchTestCase):
    def setUp(self):
        super().setUp()
        user_fact(self.workspace, self.person, "city", "Lisbon")

    def test_the_blocks_become_the_first_message_with_a_stable_id(self):
        plain = self.context()
        body = self.context(system_as="user")
        assert body["system_prompt"] == ""
        first = body["history"]["messages"][0]
        assert first == {"id": f"context-{self.thread.pk}", "role": "user", "content": plain["system_prompt"]}
        assert body["history"]["messages"][1:] == plain["history"]["messages"]
        assert body["history"]["message_ids"] == plain["history"]["message_ids"]
        assert body["tokens"] <= body["token_budget"]
        # The next turn carries the same id: a client that keeps its transcript replaces it.
        thread_append_messages(thread=self.thread, messages=[{"role": "user", "content": "and now?"}])
        again = self.context(system_as="user", message="and now?")
        ids = [m.get("id") for m in again["history"]["messages"]]
        assert ids.count(f"context-{self.thread.pk}") == 1 and ids[0] == f"context-{self.thread.pk}"

    def test_the_budget_holds_for_every_budget(self):
        for budget in (100, 200, 500, 1500, 8000):
            body = self.context(system_as="user", token_budget=budget)
            assert body["tokens"] <= budget, (budget, body["tokens"])
            assert body["system_prompt"] == ""

    def test_the_summary_left_in_the_history_is_a_user_message_too(self):
        """Without <session-memory> the summary stays in the window: it follows system_as like
        on /history/ (the same function builds both)."""
        first = Message.objects.filter(thread=self.thread).order_by("seq").first()
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="Earlier: topic zero.",
            summary_upto_id=first.pk,
            summary_upto_depth=first.depth,
            summary_tokens=8,
        )
        body = self.context(system_as="user", include=["user_profile", "history"])
        context_message, summary = body["history"]["messages"][:2]
        assert context_message["id"] == f"context-{self.thread.pk}"
        assert summary["role"] == "user" and summary["id"] == f"summary-{self.thread.pk}"
        window = self.history(system_as="user")
        assert window["messages"][0] == summary

    def test_nothing_to_send_adds_no_message(self):
        body = self.context(system_as="user", include=["history"])
        assert all("id" not in m for m in body["history"]["messages"])

    def test_bad_value_is_400_naming_the_field(self):
        for value in ("assistant", "", None, 1):
            response = self.api().post(
                URL, {"agent": "assistant", "thread": str(self.thread.pk), "system_as": value}, format="json"
            )
            assert response.status_code == 400
            assert set(response.json()["error"]["fields"]) == {"system_as"}


class EpisodicMemoryOffTests(MemorySwitchTestCase):
    def setUp(self):
        super().setUp()
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a cat named Miso.")

    def body(self, **extra):
        return {"agent": "assistant", "memory_user": str(self.person.pk), **extra}

    def test_on_the_entry_is_found_and_injected(self):
        response = self.api().post(SEARCH, self.body(query="cat"), format="json")
        assert response.status_code == 200 and response.json()["results"]
        assert "Miso" in self.context(message="my cat")["memory"]["text"]

    def test_a_failing_embedding_endpoint_leaves_the_memory_block_to_the_words(self):
        """The endpoint answers 500: the context still answers, its block found by words (it
        answered a 500 server error before)."""
        self.server.fail_next = 5
        with self.assertLogs("runtime.selectors.sections", "WARNING"):
            body = self.context(message="my cat")
        assert "Miso" in body["memory"]["text"]

    def test_off_every_episodic_call_is_a_409_and_nothing_is_stored(self):
        self.settings(episodic_memory=False)
        entries = EpisodicEntry.objects.count()
        calls = [
            (SEARCH, self.body(query="cat")),
            (SEARCH, {"agent": "assistant", "thread": str(self.thread.pk), "query": "cat"}),
            (ENTRIES, self.body(content="Ada likes jazz.")),
            (BATCH, self.body(items=[{"content": "Ada likes jazz."}])),
            (EXTRACT, self.body(transcript=[{"role": "user", "content": "I like jazz."}], sync=True)),
            # Queued for later, it must not answer as if it would run.
            (EXTRACT, self.body(transcript=[{"role": "user", "content": "I like jazz."}], sync=False)),
            (EXTRACT, {"agent": "assistant", "thread": str(self.thread.pk)}),
        ]
        for url, body in calls:
            response = self.api().post(url, body, format="json")
            assert response.status_code == 409, (url, body, response.json())
            error = response.json()["error"]
            assert error["code"] == "episodic_disabled", error
            assert error["message"] == "Episodic memory is switched off for this agent."
        assert EpisodicEntry.objects.count() == entries

    def test_off_the_context_has_no_memory_block(self):
        self.settings(episodic_memory=False)
        body = self.context(message="my cat")
        assert body["memory"] == {
            "text": "",
            "tokens": 0,
            "cap": body["memory"]["cap"],
            "items": [],
            "omitted": 0,
        }
        assert "<memory>" not in body["system_prompt"]
        assert body["timings_ms"]["query_embedding"] == 0.0

    def test_bad_input_still_wins_over_the_switch_and_outsiders_get_404(self):
        self.settings(episodic_memory=False)
        response = self.api().post(SEARCH, self.body(query="cat", top_k=0), format="json")
        assert response.status_code == 400 and "top_k" in response.json()["error"]["fields"]
        response = self.api(self.outsider_key).post(SEARCH, self.body(query="cat"), format="json")
        assert response.status_code == 404
        response = self.api().patch(AGENT, {"memory_settings": {"episodic_memory": "off"}}, format="json")
        assert response.status_code == 400 and set(response.json()["error"]["fields"]) == {"episodic_memory"}

    def test_off_the_agent_tools_cannot_search_either(self):
        """The switch lives in the episodic search itself, so the tools (REST tool calls and the
        MCP server, which share them) answer it too, as an error the model can read."""
        self.settings(episodic_memory=False)
        for name in ("search", "recall_memory"):
            call = {"name": name, "arguments": {"query": "cat", "memory_user": str(self.person.pk)}}
            response = self.api(self.agent_key).post("/api/v1/tools/call/", call, format="json")
            assert response.status_code == 200, response.json()
            result = response.json()
            assert result["isError"] is True, (name, result)
            assert "switched off" in json.dumps(result), (name, result)
