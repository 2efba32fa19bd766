"""GET /api/v1/tools/: the agent tools in the OpenAI, Anthropic and MCP shapes, from one spec."""

import asyncio
import inspect

import pytest
from django.core.exceptions import ValidationError

from core.memory_settings import RECALL_MEMORY_TYPES, memory_settings_for, memory_settings_validate
from core.services import agent_update
from core.testing import MemoryTestCase
from runtime.selectors import MEMORY_TYPES
from runtime.tool_schemas import tool_input_schema
from runtime.tools import TOOLS

URL = "/api/v1/tools/"
REQUIRED_TOOLS = {"recall", "remember", "identify_user", "recall_memory", "search", "forget"}


def _names(tools, key=lambda tool: tool["name"]):
    return [key(tool) for tool in tools]


class ToolSchemaShapeTests(MemoryTestCase):
    def get(self, key=None, **params):
        response = self.api(key).get(URL, params)
        assert response.status_code == 200, response.content
        return response.json()

    def test_without_schema_the_answer_is_the_openai_list(self):
        """No `schema` keeps the answer the endpoint always gave: OpenAI function tools."""
        default = self.get()
        assert default == self.get(schema="openai")
        for tool in default:
            assert tool["type"] == "function"
            assert set(tool["function"]) == {"name", "description", "parameters"}
            assert tool["function"]["parameters"]["type"] == "object"
        assert set(_names(default, lambda tool: tool["function"]["name"])) >= REQUIRED_TOOLS

    def test_anthropic_and_mcp_shapes_carry_the_same_tools_and_schemas(self):
        openai = {t["function"]["name"]: t["function"] for t in self.get(schema="openai")}
        anthropic = {t["name"]: t for t in self.get(schema="anthropic")}
        mcp = {t["name"]: t for t in self.get(schema="mcp")}
        assert list(openai) == list(anthropic) == list(mcp) == [spec.name for spec in TOOLS]
        for name, function in openai.items():
            assert set(anthropic[name]) == {"name", "description", "input_schema"}
            assert anthropic[name]["input_schema"] == function["parameters"] == mcp[name]["inputSchema"]
            assert anthropic[name]["description"] == function["description"] == mcp[name]["description"]
        assert mcp["recall"]["annotations"]["readOnlyHint"] is True
        assert mcp["forget"]["annotations"]["destructiveHint"] is True

    def test_recall_memory_is_listed_with_its_schema(self):
        """Issue 13: recall_memory was served by MCP only."""
        tools = {t["function"]["name"]: t["function"] for t in self.get()}
        schema = tools["recall_memory"]["parameters"]
        assert schema["required"] == ["query"]
        assert {
            "query",
            "memory_user",
            "thread",
            "top_k",
            "created_after",
            "created_before",
            "source",
            "metadata",
            "agent",
        } == set(schema["properties"])
        assert "episodic" in tools["recall_memory"]["description"]

    def test_remember_defaults_to_the_global_scope_and_overwrite(self):
        remember = {t["name"]: t for t in self.get(schema="anthropic")}["remember"]["input_schema"]
        assert remember["required"] == ["key", "value"]
        assert remember["properties"]["scope"]["default"] == "global"
        assert remember["properties"]["scope"]["enum"] == ["session", "user", "agent", "global"]
        assert remember["properties"]["overwrite"]["default"] is True

    def test_every_schema_names_exactly_the_tool_functions_arguments(self):
        """Schema and function cannot drift: the same argument names, and required means no default."""
        for spec in TOOLS:
            schema = tool_input_schema(spec)
            parameters = {
                name: p for name, p in inspect.signature(spec.fn).parameters.items() if name != "principal"
            }
            assert set(schema["properties"]) == set(parameters), spec.name
            required = {name for name, p in parameters.items() if p.default is inspect.Parameter.empty}
            assert set(schema.get("required", [])) == required, spec.name
            assert schema.get("additionalProperties") is False, spec.name

    def test_a_spec_without_a_written_schema_gets_its_signatures(self):
        """A new tool works before its schema is written out, and refuses unknown arguments."""
        from runtime.tool_calls import _schema_fields
        from runtime.tools import ToolSpec, remember

        schema = tool_input_schema(ToolSpec("probe", remember, "Probe.", read_only=False))
        assert schema["required"] == ["key", "value"]
        assert schema["properties"]["scope"]["default"] == "global"
        assert _schema_fields(schema, {"key": "k", "value": 1, "colour": "red"}) == {
            "colour": ["Unknown field."]
        }

    def test_the_mcp_server_lists_exactly_the_mcp_answer(self):
        """The MCP server's tools/list and ?schema=mcp are the same documents."""
        from runtime.mcp import build_server

        listed = asyncio.run(build_server().list_tools())
        served = [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed]
        assert served == self.get(schema="mcp")

    def test_unknown_schema_and_unknown_parameters_are_400(self):
        response = self.api().get(URL, {"schema": "gemini"})
        assert response.status_code == 400
        assert "schema" in response.json()["error"]["fields"]
        response = self.api().get(URL, {"shape": "mcp"})
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"shape": ["Unknown field."]}


class ToolSchemaAgentDefaultsTests(MemoryTestCase):
    """recall's defaults (memory type, limit, min confidence) are per-agent memory settings."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        agent_update(
            agent=cls.agent,
            memory_settings={
                "recall_memory_type": "facts",
                "recall_limit": 3,
                "recall_min_confidence": 0.7,
                "auto_inject_top_k": 4,
            },
        )

    def recall_schema(self, key=None, **params):
        response = self.api(key).get(URL, {"schema": "mcp", **params})
        assert response.status_code == 200, response.content
        tools = {tool["name"]: tool for tool in response.json()}
        return tools

    def defaults(self, tools, name="recall"):
        return {
            name: prop["default"]
            for name, prop in tools[name]["inputSchema"]["properties"].items()
            if "default" in prop
        }

    def test_workspace_defaults_without_an_agent(self):
        tools = self.recall_schema()
        assert self.defaults(tools) == {"memory_type": "all", "limit": 10, "min_confidence": 0.5}
        assert self.defaults(tools, "recall_memory") == {"top_k": 12}

    def test_named_agent_shows_its_settings(self):
        tools = self.recall_schema(agent="assistant")
        assert self.defaults(tools) == {"memory_type": "facts", "limit": 3, "min_confidence": 0.7}
        assert self.defaults(tools, "search")["top_k"] == 4
        assert self.defaults(self.recall_schema(agent="researcher")) == {
            "memory_type": "all",
            "limit": 10,
            "min_confidence": 0.5,
        }

    def test_agent_bound_key_shows_its_agents_settings(self):
        tools = self.recall_schema(key=self.agent_key)
        assert self.defaults(tools)["limit"] == 3
        response = self.api(self.agent_key).get(URL, {"agent": "researcher"})
        assert response.status_code == 404

    def test_another_workspaces_agent_is_404_and_never_created(self):
        response = self.api(self.outsider_key).get(URL, {"agent": "researcher"})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        assert not self.other_workspace.agents.filter(slug="researcher").exists()

    def test_settings_are_validated(self):
        with pytest.raises(ValidationError) as info:
            memory_settings_validate(
                {"recall_memory_type": "everything", "recall_limit": 0, "recall_min_confidence": 2}
            )
        assert set(info.value.error_dict) == {"recall_memory_type", "recall_limit", "recall_min_confidence"}
        assert memory_settings_for(self.agent).recall_limit == 3

    def test_recall_memory_types_are_the_selectors(self):
        assert set(RECALL_MEMORY_TYPES) == set(MEMORY_TYPES)
