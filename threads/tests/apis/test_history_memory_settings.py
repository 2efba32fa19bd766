"""GET /threads/{id}/history/ under the agent's conversation_memory and memory_mode settings
(issue 13 item 2), and the one function that turns a system message into a user message."""

from core.services import agent_update
from core.testing import MemoryTestCase
from threads.models import Message, Thread
from threads.selectors import chat_system_message
from threads.tests.factories import append, make_thread


class HistoryMemorySettingsTests(MemoryTestCase):
    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(self.thread, ("user", "main question"), ("assistant", "main answer"))
        append(self.thread, ("user", "node question"), ("assistant", "node answer"), node_id="critic")
        self.url = f"/api/v1/threads/{self.thread.pk}/history/"

    def get(self, key=None, status=200, **params):
        response = self.api(key).get(self.url, params)
        assert response.status_code == status, response.json()
        return response.json()

    def contents(self, body):
        return [m["content"] for m in body["messages"]]

    def test_the_window_reports_its_mode_node_and_reason(self):
        body = self.get(node="critic")
        assert (body["memory_mode"], body["node"], body["off_reason"]) == ("node", "critic", None)
        assert self.contents(body) == ["node question", "node answer"]
        body = self.get()
        assert (body["memory_mode"], body["node"]) == ("node", None)
        assert self.contents(body) == ["main question", "main answer"]

    def test_conversation_memory_off_empties_every_window_but_keeps_the_rows(self):
        first = Message.objects.filter(thread=self.thread).order_by("seq").first()
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="Earlier.", summary_upto_id=first.pk, summary_upto_depth=first.depth, summary_tokens=3
        )
        agent_update(
            agent=self.agent, memory_settings={"conversation_memory": False, "semantic_recall": True}
        )
        for params in ({}, {"node": "critic"}, {"system_as": "user"}, {"semantic_recall": "true"}):
            body = self.get(**params)
            assert body["messages"] == [] and body["message_ids"] == [] and body["tokens"] == 0
            assert body["summary_applied"] is False and body["recalled"] == []
            assert body["off_reason"] == "conversation_memory_off"
        # Stored and listed as before: only what is sent to a model changes.
        assert Message.objects.filter(thread=self.thread).count() == 4
        assert len(self.api().get(f"/api/v1/threads/{self.thread.pk}/messages/").json()["results"]) == 4
        response = self.api().post(
            f"/api/v1/threads/{self.thread.pk}/messages/",
            {"role": "user", "content": "still stored"},
            format="json",
        )
        assert response.status_code == 201

    def test_the_agents_mode_applies_unless_the_request_says(self):
        agent_update(agent=self.agent, memory_settings={"memory_mode": "conversation"})
        body = self.get(node="critic")
        assert (body["memory_mode"], body["node"]) == ("conversation", None)
        assert self.contents(body) == ["main question", "main answer"]
        body = self.get(node="critic", memory_mode="node")
        assert self.contents(body) == ["node question", "node answer"]
        # An agent-bound key reads its own agent's settings the same way.
        body = self.get(self.agent_key, node="critic")
        assert self.contents(body) == ["main question", "main answer"]

    def test_hostile_values_are_400_naming_the_field(self):
        for value in ("everything", "node\u202e", "conversation ", "x" * 5000):
            response = self.api().get(self.url, {"memory_mode": value})
            assert response.status_code == 400
            assert set(response.json()["error"]["fields"]) == {"memory_mode"}
        response = self.api().get(self.url, {"system_as": "assistant"})
        assert response.status_code == 400 and set(response.json()["error"]["fields"]) == {"system_as"}
        assert self.api(self.outsider_key).get(self.url, {"memory_mode": "node"}).status_code == 404

    def test_system_as_user_gives_the_summary_a_stable_id(self):
        first = Message.objects.filter(thread=self.thread).order_by("seq").first()
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="Earlier.", summary_upto_id=first.pk, summary_upto_depth=first.depth, summary_tokens=3
        )
        summary = self.get(system_as="user")["messages"][0]
        assert summary == chat_system_message(
            content="Summary of the earlier conversation:\nEarlier.",
            stable_id=f"summary-{self.thread.pk}",
            system_as="user",
        )
        assert summary["id"] == f"summary-{self.thread.pk}" and summary["role"] == "user"
        assert self.get()["messages"][0] == {
            "role": "system",
            "content": "Summary of the earlier conversation:\nEarlier.",
        }
