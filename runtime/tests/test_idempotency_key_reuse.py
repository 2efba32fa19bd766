"""An idempotency key names one message: a retry stores it once, and the same key sent with a
different message is refused (409 `conflict`) instead of silently answering with the old one."""

import json

from django.urls import reverse

from core.testing import MemoryTestCase
from runtime.tests.factories import conversation, person
from threads.models import Message

CONTEXT_URL = reverse("api:runtime:context")
CALL_URL = "/api/v1/tools/call/"


class ContextAppendIdempotencyTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")
        cls.thread = conversation(cls.workspace, cls.agent, cls.person, turns=2)

    def post(self, **body):
        body = {"agent": "assistant", "thread": str(self.thread.pk), "append": True, **body}
        return self.api().post(CONTEXT_URL, body, format="json")

    def test_a_retry_stores_the_message_once(self):
        first = self.post(message="Where is my parcel?", idempotency_key="turn-7")
        again = self.post(message="Where is my parcel?", idempotency_key="turn-7")
        assert first.status_code == again.status_code == 200, again.json()
        assert first.json()["appended_message"] == again.json()["appended_message"]
        assert Message.objects.filter(thread=self.thread, content="Where is my parcel?").count() == 1
        assert again.json()["history"]["messages"][-1]["content"] == "Where is my parcel?"

    def test_the_same_key_with_another_message_is_a_conflict(self):
        """Before: 200, the new message was dropped and the history ended with the old one."""
        assert self.post(message="Where is my parcel?", idempotency_key="turn-7").status_code == 200
        response = self.post(message="Cancel my order instead.", idempotency_key="turn-7")
        assert response.status_code == 409, response.json()
        error = response.json()["error"]
        assert error["code"] == "conflict"
        assert list(error["fields"]) == ["idempotency_key"]
        assert not Message.objects.filter(content="Cancel my order instead.").exists()

    def test_a_conflict_through_the_context_tool_is_a_tool_error(self):
        arguments = {"agent": "assistant", "thread": str(self.thread.pk), "append": True}
        arguments["idempotency_key"] = "turn-8"
        call = {"name": "context", "arguments": {**arguments, "message": "first words"}}
        assert self.api().post(CALL_URL, call, format="json").json()["isError"] is False
        call = {"name": "context", "arguments": {**arguments, "message": "other words"}}
        result = self.api().post(CALL_URL, call, format="json").json()
        assert result["isError"] is True
        assert json.loads(result["content"][0]["text"])["error"]["code"] == "conflict"
        assert not Message.objects.filter(content="other words").exists()


class RecordTurnIdempotencyTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")
        cls.thread = conversation(cls.workspace, cls.agent, cls.person, turns=1)

    def record(self, reply: str, key: str = "turn-3") -> dict:
        arguments = {"thread": str(self.thread.pk), "assistant_message": reply, "idempotency_key": key}
        call = {"name": "record_turn", "arguments": {**arguments, "extract": False}}
        response = self.api().post(CALL_URL, call, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    def test_a_retry_stores_the_reply_once(self):
        first = self.record("Your parcel is in Lisbon.")
        again = self.record("Your parcel is in Lisbon.")
        assert first["structuredContent"]["message_ids"] == again["structuredContent"]["message_ids"]
        assert Message.objects.filter(content="Your parcel is in Lisbon.").count() == 1

    def test_the_same_key_with_another_reply_is_a_conflict(self):
        """Before: the second reply was silently dropped and the old message's id answered."""
        self.record("Your parcel is in Lisbon.")
        result = self.record("Your parcel is in Porto.")
        assert result["isError"] is True
        error = json.loads(result["content"][0]["text"])["error"]
        assert error["code"] == "conflict"
        assert list(error["fields"]) == ["idempotency_key"]
        assert not Message.objects.filter(content="Your parcel is in Porto.").exists()
