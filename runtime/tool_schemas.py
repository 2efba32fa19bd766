"""OpenAI-style function schemas of the REST agent tools (served by GET /api/v1/tools/).

Each tool maps one-to-one onto an endpoint, with the same argument names:
recall -> POST /api/v1/recall/, remember -> POST /api/v1/facts/remember/,
identify_user -> POST /api/v1/memory-users/identify/. The MCP server's tools are
runtime.tools, described by their docstrings.
"""

from facts.models import Fact
from runtime.selectors import MEMORY_TYPES

_CONTEXT = {
    "memory_user": {"type": "string", "description": "Id of the memory user the agent is talking to."},
    "thread": {"type": "string", "description": "Id of the current conversation thread."},
}


def tool_schemas() -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": "recall",
                "description": (
                    "Recall what you know. With no arguments, list the facts you know in this "
                    "conversation. With `key`, get that fact (the most specific scope wins: session, "
                    "user, agent, global), or facts with similar keys. With `query`, search facts, "
                    "procedures and past episodes by text."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string", "description": "A fact key, e.g. user_timezone."},
                        "query": {"type": "string", "description": "Words to search for."},
                        "memory_type": {
                            "type": "string",
                            "enum": list(MEMORY_TYPES),
                            "description": "What to search with `query`.",
                        },
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        "min_confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        **_CONTEXT,
                    },
                    "required": [],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "remember",
                "description": (
                    "Remember a fact. Remembering the same value again confirms it; a different value "
                    "replaces it and keeps the old one in history, unless overwrite is false."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string", "description": "Short snake_case key, e.g. user_timezone."},
                        "value": {"description": "Any JSON value."},
                        "scope": {
                            "type": "string",
                            "enum": list(Fact.Scope.values),
                            "description": (
                                "session: this conversation only; user: this person; agent: yourself; "
                                "global: everyone in the workspace."
                            ),
                        },
                        "fact_type": {"type": "string", "enum": list(Fact.FactType.values)},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        "evidence": {"type": "string", "description": "Why you believe this."},
                        "overwrite": {
                            "type": "boolean",
                            "description": "Replace a different existing value.",
                        },
                        **_CONTEXT,
                    },
                    "required": ["key", "value", "scope"],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "identify_user",
                "description": (
                    "Find or create the person you are talking to from their channel identity, and get "
                    "what you know about them: facts, preferences and recent episodes."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "channel": {"type": "string", "description": "telegram, email, slack, web, ..."},
                        "external_id": {"type": "string", "description": "Their id on that channel."},
                        "profile": {"type": "object", "description": 'Optional profile, e.g. {"name": ...}.'},
                    },
                    "required": ["channel", "external_id"],
                    "additionalProperties": False,
                },
            },
        },
    ]
