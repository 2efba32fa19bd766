"""Tool arguments that break their JSON Schema are a tool error the model reads, never an
HTTP error of the whole call (and never a silently empty answer)."""

import json

from core.testing import MemoryTestCase
from facts.models import Fact
from runtime.tests.factories import conversation, person
from runtime.tool_schemas import RECORD_TURN
from threads.models import Message

CALL_URL = "/api/v1/tools/call/"


def openai_call(name, arguments: str | dict, call_id="call_1"):
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


class ToolArgumentTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")
        cls.thread = conversation(cls.workspace, cls.agent, cls.person, turns=2)

    def post(self, body):
        response = self.api().post(CALL_URL, body, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    def error(self, result) -> dict:
        return json.loads(result["content"])["error"]

    def test_an_id_that_is_not_a_uuid_is_a_field_error(self):
        """Before: `leaf` reached SQL and the whole request was a 400 with no tool result."""
        result = self.post(openai_call("history", {"thread": str(self.thread.pk), "leaf": "msg-42"}))
        assert self.error(result)["fields"] == {"leaf": ["Must be a valid UUID."]}
        result = self.post(openai_call("recall", {"memory_user": "Ada", "agent": "assistant"}))
        assert self.error(result)["fields"] == {"memory_user": ["Must be a valid UUID."]}

    def test_a_bad_id_in_a_list_leaves_the_other_calls_answered(self):
        results = self.post(
            [
                openai_call("remember", {"key": "office", "value": "Lisbon"}, "call_a"),
                openai_call("history", {"thread": str(self.thread.pk), "leaf": "last"}, "call_b"),
            ]
        )
        assert json.loads(results[0]["content"])["outcome"] == "created"
        assert self.error(results[1])["fields"] == {"leaf": ["Must be a valid UUID."]}
        assert Fact.objects.filter(key="office").exists()

    def test_nan_and_infinity_in_a_number_argument_are_field_errors(self):
        """OpenAI's argument string is read by Python's json, which accepts NaN; before,
        `min_confidence: NaN` silently matched no fact at all."""
        person = json.dumps({"agent": "assistant", "memory_user": str(self.person.pk)})
        arguments = person[:-1] + ', "min_confidence": NaN}'
        result = self.post(openai_call("recall", arguments))
        assert list(self.error(result)["fields"]) == ["min_confidence"]
        result = self.post(openai_call("remember", '{"key": "k", "value": 1, "confidence": Infinity}'))
        assert list(self.error(result)["fields"]) == ["confidence"]
        assert not Fact.objects.filter(key="k").exists()

    def test_record_turn_takes_every_idempotency_key_its_schema_allows(self):
        """The key is stored with a ":user" / ":assistant" suffix; before, the schema allowed 200
        characters and keys over 190 failed with an error naming `messages[0].idempotency_key`."""
        longest = RECORD_TURN["properties"]["idempotency_key"]["maxLength"]
        arguments = {"thread": str(self.thread.pk), "assistant_message": "Done.", "extract": False}
        result = self.post(openai_call("record_turn", {**arguments, "idempotency_key": "k" * longest}))
        assert "error" not in json.loads(result["content"]), result
        assert Message.objects.filter(thread=self.thread, content="Done.").count() == 1
        result = self.post(openai_call("record_turn", {**arguments, "idempotency_key": "k" * 200}))
        assert list(self.error(result)["fields"]) == ["idempotency_key"]


class IntegralNumberTests(MemoryTestCase):
    """JSON Schema counts 2.0 as an integer, and models write counts that way; the tool then
    got a float its own check refused with a message the model could not act on."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")

    def result(self, name, arguments):
        response = self.api().post(CALL_URL, openai_call(name, arguments), format="json")
        assert response.status_code == 200, response.content
        return json.loads(response.json()["content"])

    def test_a_count_written_as_a_whole_float_is_that_count(self):
        for key in ("office", "desk", "badge"):
            self.result("remember", {"key": key, "value": "x", "memory_user": str(self.person.pk)})
        person_args = {"agent": "assistant", "memory_user": str(self.person.pk), "query": "x"}
        as_float = self.result("recall", {**person_args, "limit": 2.0})
        as_int = self.result("recall", {**person_args, "limit": 2})
        assert "error" not in as_float, as_float
        assert as_float == as_int

    def test_a_fractional_count_is_a_field_error(self):
        result = self.result("recall", {"agent": "assistant", "query": "x", "limit": 2.5})
        assert result["error"]["fields"] == {"limit": ["Must be of type integer."]}
