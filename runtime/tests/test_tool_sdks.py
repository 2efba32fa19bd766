"""Agent loops through the vendors' own SDKs, with no glue code: the tools come from
GET /api/v1/tools/?schema=..., the model's tool call goes unchanged to POST /api/v1/tools/call/
and the answer goes unchanged back to the model.

The models are local HTTP servers speaking each protocol (core.testing_openai for OpenAI's
chat completions, a Messages endpoint below for Anthropic); the SDKs are the real ones.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import openai
from mcp_types import CallToolResult

from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from facts.models import Fact
from identities.tests.factories import MemoryUserFactory


class ToolCallingOpenAIServer(OpenAITestServer):
    """OpenAITestServer whose model answers with the assistant message `script(body)` returns,
    tool calls included (the base server only answers text)."""

    def __init__(self, script):
        super().__init__()
        self.script = script

    def _chat(self, body: dict) -> dict:
        message = {"role": "assistant", "content": None, **self.script(body)}
        return {
            "id": "chatcmpl-tools",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "test"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


class AnthropicTestServer:
    """A local Messages API endpoint: `script(body)` gives the content blocks of each reply."""

    def __init__(self, script):
        self.script = script
        self.requests: list[dict] = []

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.requests.append(body)
                content = outer.script(body)
                reply = {
                    "id": f"msg_{len(outer.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "test"),
                    "content": content,
                    "stop_reason": "tool_use"
                    if any(b["type"] == "tool_use" for b in content)
                    else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class ToolSdkRoundTripTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)

    def tools(self, schema):
        response = self.api(self.agent_key).get("/api/v1/tools/", {"schema": schema})
        assert response.status_code == 200
        return response.json()

    def execute(self, call):
        response = self.api(self.agent_key).post("/api/v1/tools/call/", call, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    def test_openai_sdk_remembers_then_recalls(self):
        """The model calls remember, reads the result, calls recall, reads the value back."""
        person = str(self.person.pk)

        def model(body):
            last = body["messages"][-1]
            if last["role"] == "user":
                arguments = {
                    "key": "favourite_tea",
                    "value": "oolong",
                    "scope": "user",
                    "memory_user": person,
                }
                return {
                    "tool_calls": [
                        {
                            "id": "call_remember",
                            "type": "function",
                            "function": {"name": "remember", "arguments": json.dumps(arguments)},
                        }
                    ]
                }
            if last["tool_call_id"] == "call_remember":
                assert json.loads(last["content"])["outcome"] == "created"
                arguments = {"key": "favourite_tea", "memory_user": person}
                return {
                    "tool_calls": [
                        {
                            "id": "call_recall",
                            "type": "function",
                            "function": {"name": "recall", "arguments": json.dumps(arguments)},
                        }
                    ]
                }
            facts = json.loads(last["content"])["facts"]
            return {"content": f"You like {facts[0]['value']} tea."}

        tools = self.tools("openai")
        with ToolCallingOpenAIServer(model) as server:
            client = openai.OpenAI(base_url=server.url, api_key="test", max_retries=0)
            messages = [{"role": "user", "content": "Remember that I like oolong, then tell me what I like."}]
            for _ in range(3):
                completion = client.chat.completions.create(model="test", messages=messages, tools=tools)
                message = completion.choices[0].message
                if not message.tool_calls:
                    break
                messages.append(message.model_dump(exclude_none=True))
                for tool_call in message.tool_calls:
                    messages.append(self.execute(tool_call.model_dump()))
            sent = [body for path, body in server.requests]

        assert message.content == "You like oolong tea."
        assert sent[0]["tools"] == tools
        assert [m["role"] for m in sent[-1]["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
        fact = Fact.objects.get(key="favourite_tea")
        assert (fact.value, fact.scope, fact.memory_user_id) == ("oolong", "user", self.person.pk)

    def test_anthropic_sdk_remembers_then_recalls(self):
        person = str(self.person.pk)

        def model(body):
            last = body["messages"][-1]
            if isinstance(last["content"], str):
                return [
                    {
                        "type": "tool_use",
                        "id": "toolu_remember",
                        "name": "remember",
                        "input": {
                            "key": "home_city",
                            "value": "Porto",
                            "scope": "user",
                            "memory_user": person,
                        },
                    },
                    {"type": "tool_use", "id": "toolu_bad", "name": "recall", "input": {"limit": 0}},
                ]
            results = {block["tool_use_id"]: block for block in last["content"]}
            if "toolu_remember" in results:
                assert results["toolu_bad"]["is_error"] is True
                return [
                    {
                        "type": "tool_use",
                        "id": "toolu_recall",
                        "name": "recall",
                        "input": {"key": "home_city", "memory_user": person},
                    }
                ]
            facts = json.loads(results["toolu_recall"]["content"])["facts"]
            return [{"type": "text", "text": f"You live in {facts[0]['value']}."}]

        tools = self.tools("anthropic")
        with AnthropicTestServer(model) as server:
            client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
            messages = [{"role": "user", "content": "I live in Porto. Where do I live?"}]
            for _ in range(3):
                reply = client.messages.create(model="test", max_tokens=100, messages=messages, tools=tools)
                calls = [block for block in reply.content if block.type == "tool_use"]
                if not calls:
                    break
                messages.append(
                    {"role": "assistant", "content": [block.model_dump() for block in reply.content]}
                )
                messages.append(
                    {"role": "user", "content": self.execute([block.model_dump() for block in calls])}
                )

        assert reply.content[0].text == "You live in Porto."
        assert server.requests[0]["tools"] == tools
        assert Fact.objects.get(key="home_city").value == "Porto"

    def test_mcp_shape_round_trip(self):
        """The MCP shape in and a CallToolResult out, parsed by the MCP SDK's own type."""
        tools = {tool["name"]: tool for tool in self.tools("mcp")}
        assert "remember" in tools
        stored = CallToolResult.model_validate(
            self.execute(
                {
                    "name": "remember",
                    "arguments": {
                        "key": "pet",
                        "value": "Miso",
                        "scope": "user",
                        "memory_user": str(self.person.pk),
                    },
                }
            )
        )
        assert not stored.is_error
        recalled = CallToolResult.model_validate(
            self.execute({"name": "recall", "arguments": {"key": "pet", "memory_user": str(self.person.pk)}})
        )
        assert recalled.structured_content["facts"][0]["value"] == "Miso"
        refused = CallToolResult.model_validate(
            self.execute({"name": "remember", "arguments": {"key": "pet", "value": "Rex", "scope": "moon"}})
        )
        assert refused.is_error
        assert json.loads(refused.content[0].text)["error"]["fields"]["scope"]
