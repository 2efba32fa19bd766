"""The agent tools' argument schemas and their rendering in each vendor's function-calling shape.

`runtime.tools.TOOLS` (one `ToolSpec` per tool: function, description, JSON Schema of its
arguments, which defaults come from the agent's memory settings) is the only description
of the tools; everything here renders it:

- `schema="openai"`: `{"type": "function", "function": {"name", "description", "parameters"}}`
  (Chat Completions `tools=`); also the answer of `GET /api/v1/tools/` without `schema`;
- `schema="anthropic"`: `{"name", "description", "input_schema"}` (Messages API `tools=`);
- `schema="mcp"`: `{"name", "description", "inputSchema", "outputSchema", "annotations"}`, the
  MCP `Tool` exactly as the MCP server (runtime.mcp) lists it.

The MCP server, `GET /api/v1/tools/` and `POST /api/v1/tools/call/` all read the same specs,
so a tool's schema, its validation and its execution cannot drift apart.
"""

import copy
import inspect

from django.conf import settings as django_settings

from episodic.models import EpisodicEntry
from facts.models import Fact

SCHEMA_OPENAI = "openai"
SCHEMA_ANTHROPIC = "anthropic"
SCHEMA_MCP = "mcp"
SCHEMAS = (SCHEMA_OPENAI, SCHEMA_ANTHROPIC, SCHEMA_MCP)

# Every tool returns one JSON object (MCP structured content).
OUTPUT_SCHEMA = {"type": "object", "additionalProperties": True}

# Ids and slugs as they arrive from a model; lengths are the columns'.
_UUID = {"type": "string", "format": "uuid", "maxLength": 36}
AGENT = {
    "type": "string",
    "maxLength": 100,
    "description": "Agent slug; implied by an agent-bound key.",
}
MEMORY_USER = {**_UUID, "description": "Id of the person (memory user) you are talking to."}
THREAD = {**_UUID, "description": "Id of the current conversation thread."}
QUERY = {"type": "string", "maxLength": 2000}
TOP_K = {"type": "integer", "minimum": 1, "maximum": 100}
CREATED_AFTER = {
    "type": "string",
    "maxLength": 64,
    "description": "Only memories stored at or after this time: an ISO 8601 date or date and time.",
}
CREATED_BEFORE = {
    "type": "string",
    "maxLength": 64,
    "description": "Only memories stored before this time: an ISO 8601 date or date and time.",
}
SOURCE_FILTER = {
    "type": "array",
    "items": {"type": "string", "enum": list(EpisodicEntry.Source.values)},
    "minItems": 1,
    "uniqueItems": True,
    "description": "Only memories of these kinds: user_assertion (the person said it), "
    "user_accepted_assistant_proposal (they agreed to what you proposed), verified_assistant_finding "
    "(you checked it), agent_direct (stored with store_memory).",
}
METADATA_FILTER = {
    "type": "object",
    "description": "Only memories stored with these labels (the metadata of store_memory), "
    'e.g. {"project": "alpha"}.',
}


def _object(properties: dict, required: tuple = ()) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


IDENTIFY_USER = _object(
    {
        "channel": {"type": "string", "maxLength": 50, "description": "telegram, email, slack, web, ..."},
        "external_id": {"type": "string", "maxLength": 255, "description": "Their id on that channel."},
        "profile": {"type": "object", "description": 'Optional profile, e.g. {"name": "Ada"}.'},
        "agent": AGENT,
    },
    ("channel", "external_id"),
)

REMEMBER = _object(
    {
        "key": {"type": "string", "maxLength": 255, "description": "A snake_case key, e.g. user_timezone."},
        "value": {"description": "Any JSON value."},
        "scope": {
            "type": "string",
            "enum": list(Fact.Scope.values),
            "default": Fact.Scope.GLOBAL,
            "description": (
                "session: this conversation only (needs thread); user: this person (needs "
                "memory_user); agent: yourself; global (the default): everyone in the workspace."
            ),
        },
        "fact_type": {
            "type": "string",
            "enum": list(Fact.FactType.values),
            "default": Fact.FactType.WORLD_KNOWLEDGE,
        },
        "memory_user": MEMORY_USER,
        "thread": THREAD,
        "agent": AGENT,
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "evidence": {"type": "string", "maxLength": 10_000, "description": "Why you believe this."},
        "overwrite": {
            "type": "boolean",
            "default": True,
            "description": "Replace a different stored value; false keeps the stored one.",
        },
    },
    ("key", "value"),
)

RECALL = _object(
    {
        "key": {"type": "string", "maxLength": 255, "description": "A fact key, e.g. user_timezone."},
        "query": {**QUERY, "description": "Words to search for."},
        "memory_type": {
            "type": "string",
            "enum": ["facts", "procedures", "episodes", "all"],
            "description": "What to search with `query`.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "min_confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "memory_user": MEMORY_USER,
        "thread": THREAD,
        "agent": AGENT,
    }
)

RECALL_MEMORY = _object(
    {
        "query": {**QUERY, "description": "What to look for in this person's memories."},
        "memory_user": MEMORY_USER,
        "thread": THREAD,
        "top_k": TOP_K,
        "created_after": CREATED_AFTER,
        "created_before": CREATED_BEFORE,
        "source": SOURCE_FILTER,
        "metadata": METADATA_FILTER,
        "agent": AGENT,
    },
    ("query",),
)

SEARCH = _object(
    {
        "query": {**QUERY, "description": "What to look for in this person's memories."},
        "memory_user": MEMORY_USER,
        "thread": THREAD,
        "top_k": TOP_K,
        "mode": {
            "type": "string",
            "enum": ["hybrid", "lexical", "vector"],
            "default": "hybrid",
            "description": "hybrid: words and meaning; lexical: words only; vector: meaning only.",
        },
        "created_after": CREATED_AFTER,
        "created_before": CREATED_BEFORE,
        "source": SOURCE_FILTER,
        "metadata": METADATA_FILTER,
        "agent": AGENT,
    },
    ("query",),
)

FORGET = _object(
    {
        "key": {"type": "string", "maxLength": 255, "description": "Forget the fact stored under this key."},
        "scope": {
            "type": "string",
            "enum": list(Fact.Scope.values),
            "description": "With key: only this scope (otherwise the most specific one that holds the key).",
        },
        "fact": {**_UUID, "description": "Id of a fact to forget."},
        "memory": {**_UUID, "description": "Id of an episodic memory (recall_memory, search) to forget."},
        "memory_user": MEMORY_USER,
        "thread": THREAD,
        "agent": AGENT,
    }
)

STORE_MEMORY = _object(
    {
        "content": {
            "type": "string",
            "maxLength": django_settings.EPISODIC_MAX_ENTRY_LENGTH,
            "description": "One short self-contained sentence about the person, in the third person.",
        },
        "evidence": {
            "type": "string",
            "maxLength": 100_000,
            "description": "An exact quote that proves it (needed for every source but agent_direct).",
        },
        "source": {
            "type": "string",
            "enum": list(EpisodicEntry.Source.values),
            "default": EpisodicEntry.Source.AGENT_DIRECT,
        },
        "memory_user": MEMORY_USER,
        "thread": THREAD,
        "source_message": {**_UUID, "description": "Id of the message the note comes from."},
        "metadata": {
            "type": "object",
            "description": 'Labels stored with the note, e.g. {"project": "alpha"}; recall_memory and '
            "search can filter by them.",
        },
        "agent": AGENT,
    },
    ("content",),
)

HISTORY = _object(
    {
        "thread": THREAD,
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2_000_000},
        "max_messages": {"type": "integer", "minimum": 1, "maximum": 10_000},
        "node": {"type": "string", "maxLength": 100},
        "leaf": {**_UUID, "description": "Message id ending the branch to read."},
    },
    ("thread",),
)

CONTEXT = _object(
    {
        "message": {"type": "string", "maxLength": 100_000, "description": "The user's message this turn."},
        "memory_user": MEMORY_USER,
        "channel": {"type": "string", "maxLength": 50},
        "external_id": {"type": "string", "maxLength": 255},
        "thread": THREAD,
        "channel_chat_id": {"type": "string", "maxLength": 255},
        "token_budget": {"type": "integer", "minimum": 100, "maximum": 2_000_000, "default": 4000},
        "append": {"type": "boolean", "default": False},
        "idempotency_key": {"type": "string", "maxLength": 200},
        "agent": AGENT,
    }
)

RECORD_TURN = _object(
    {
        "thread": THREAD,
        "assistant_message": {"type": "string", "maxLength": 100_000},
        "user_message": {"type": "string", "maxLength": 100_000},
        # Stored as "<key>:user" and "<key>:assistant" in a 200-character column.
        "idempotency_key": {"type": "string", "maxLength": 200 - len(":assistant")},
        "extract": {"type": "boolean", "default": True},
        "candidates": {
            "type": "array",
            "maxItems": 50,
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "source": {"type": "string"},
                    "evidence": {"type": "string"},
                },
                "required": ["content"],
            },
        },
        "last_messages": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
    },
    ("thread",),
)


def tool_input_schema(spec, settings=None) -> dict:
    """The JSON Schema of `spec`'s arguments, with the defaults `settings` (an agent's memory
    settings) gives the arguments named in `spec.setting_defaults`.

    A spec without a written schema gets the one its signature implies (as the MCP SDK
    derives it), so a new tool is usable before its schema is written out.
    """
    if spec.parameters is None:
        from mcp.server.mcpserver.utilities.func_metadata import func_metadata

        schema = func_metadata(spec.fn, skip_names=["principal"]).arg_model.model_json_schema(by_alias=True)
        # An argument the function does not take must be a field error, never a TypeError.
        schema["additionalProperties"] = False
    else:
        schema = copy.deepcopy(spec.parameters)
    if settings is not None:
        for argument, setting in spec.setting_defaults.items():
            schema["properties"][argument]["default"] = getattr(settings, setting)
    return schema


def _annotations(spec) -> dict:
    if spec.read_only:
        return {"readOnlyHint": True, "openWorldHint": False}
    return {"readOnlyHint": False, "destructiveHint": spec.destructive, "openWorldHint": False}


def tool_render(spec, schema: str, settings=None) -> dict:
    description = inspect.cleandoc(spec.description or "")
    parameters = tool_input_schema(spec, settings)
    if schema == SCHEMA_ANTHROPIC:
        return {"name": spec.name, "description": description, "input_schema": parameters}
    if schema == SCHEMA_MCP:
        return {
            "name": spec.name,
            "description": description,
            "inputSchema": parameters,
            "outputSchema": OUTPUT_SCHEMA,
            "annotations": _annotations(spec),
        }
    return {
        "type": "function",
        "function": {"name": spec.name, "description": description, "parameters": parameters},
    }


def tool_schemas(schema: str = SCHEMA_OPENAI, *, settings=None) -> list[dict]:
    """Every agent tool in the `schema` vendor shape; `settings` fills the per-agent defaults
    (core.memory_settings), or the workspace defaults when None."""
    from core.memory_settings import memory_settings_for
    from runtime.tools import TOOLS

    settings = settings if settings is not None else memory_settings_for(None)
    return [tool_render(spec, schema, settings) for spec in TOOLS]
