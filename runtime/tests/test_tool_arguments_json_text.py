"""Tool arguments written as JSON text pass the same guard as a request body: nesting, NUL and
lone surrogates are a tool error naming the argument, never a 500 or a refusal of the whole
request, and nothing is stored."""

import json

from core.parsers import JSON_NUL, JSON_SURROGATE, JSON_TOO_DEEP
from core.testing import MemoryTestCase
from identities.models import MemoryUser
from runtime.tests.factories import person

CALL_URL = "/api/v1/tools/call/"


def openai_call(name, arguments: str, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def mcp_call(name, arguments: dict):
    return {"name": name, "arguments": arguments}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


class ToolArgumentGuardTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = person(cls.workspace, display_name="Ada")

    def post(self, body):
        response = self.api().post(CALL_URL, body, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    def error(self, result) -> dict:
        if "content" in result and isinstance(result["content"], list):
            assert result["isError"] is True
            return json.loads(result["content"][0]["text"])["error"]
        return json.loads(result["content"])["error"]

    def test_an_openai_argument_string_nested_past_the_decoder_is_a_tool_error(self):
        """Before: json.loads overflowed the stack on the argument string (the body itself is
        shallow, so the parser guard let it through) and the request was a 500."""
        for arguments in (nested(100_000), '{"query": ' + nested(100_000) + "}"):
            results = self.post(
                [
                    openai_call("remember", json.dumps({"key": "office", "value": "Lisbon"}), "call_a"),
                    openai_call("recall", arguments, "call_b"),
                ]
            )
            assert json.loads(results[0]["content"])["outcome"] in ("created", "confirmed")
            assert self.error(results[1])["message"] == JSON_TOO_DEEP

    def test_an_object_argument_sent_as_json_text_is_guarded_after_it_is_read(self):
        """Some MCP hosts send an object argument as JSON text, which the tool reads as the
        object. Before, the text was guarded and the object was not: nesting overflowed the
        stack (a 500), a NUL made the whole request a 400 from the database, and a document
        nested past the API's limit was stored."""
        search = {"query": "tea", "memory_user": str(self.person.pk), "agent": "assistant"}
        deep = self.post(mcp_call("search", {**search, "metadata": '{"a": ' + nested(5000) + "}"}))
        assert self.error(deep)["message"] == JSON_TOO_DEEP
        past_limit = self.post(
            mcp_call(
                "identify_user", {"channel": "t", "external_id": "1", "profile": '{"a": ' + nested(500) + "}"}
            )
        )
        assert self.error(past_limit)["message"] == JSON_TOO_DEEP
        nul = self.post(
            mcp_call("identify_user", {"channel": "t", "external_id": "1", "profile": '{"a": "\\u0000"}'})
        )
        assert self.error(nul)["fields"] == {"profile.a": [JSON_NUL]}
        surrogate = self.post(
            mcp_call("identify_user", {"channel": "t", "external_id": "1", "profile": '{"name": "\\ud800"}'})
        )
        assert self.error(surrogate)["fields"] == {"profile.name": [JSON_SURROGATE]}
        assert not MemoryUser.objects.filter(canonical_id="t:1").exists()

    def test_an_object_argument_as_clean_json_text_still_works(self):
        result = self.post(
            mcp_call("identify_user", {"channel": "t", "external_id": "2", "profile": '{"name": "Ada"}'})
        )
        assert result["isError"] is False, result
        assert MemoryUser.objects.get(canonical_id="t:2").display_name == "Ada"
