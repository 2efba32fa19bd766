"""The runtime's endpoints: the context of a turn, and the agent tools that read across tiers
(recall, identify_user) with their OpenAI-style schemas."""

from django.db import transaction
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import agent_resolve_optional
from core.counters import RECALLS_CONTEXT, RECALLS_RECALL, recall_served
from core.lib.escaping import strip_invisible_json
from core.memory_settings import MEMORY_MODES, memory_settings_for
from core.serializers import ContextInputSerializer, StrictSerializer
from episodes.apis import EPISODE_EXAMPLE, EpisodeOutputSerializer
from facts.apis import FACT_EXAMPLE, FactOutputSerializer
from facts.selectors import memory_user_context
from facts.services import fact_touch
from identities.apis import ADA_ID, MEMORY_USER_EXAMPLE, MemoryUserOutputSerializer
from identities.selectors import memory_user_get
from identities.services import memory_user_identify
from procedures.apis import ProcedureOutputSerializer
from runtime.selectors import MEMORY_TYPES, SECTIONS, context_result_data, recall
from runtime.services import ContextRequest, context_assemble
from runtime.tool_calls import (
    ID_MAX_CHARS,
    NAME_MAX_CHARS,
    SHAPE_ANTHROPIC,
    SHAPE_MCP,
    SHAPE_OPENAI,
    TOOL_CALLS_MAX,
    tool_call_shape,
    tool_calls_parse,
    tool_calls_run,
)
from runtime.tool_schemas import OUTPUT_SCHEMA, SCHEMA_OPENAI, SCHEMAS, tool_schemas
from threads.lib.parts import CONTENT_FORMATS
from threads.selectors import CONVERSATION_MEMORY_OFF, SYSTEM_AS_MODES, TOOL_FORMATS, memory_context_resolve

# 2M tokens: the largest context window the memory settings accept.
MAX_TOKEN_BUDGET = 2_000_000
MAX_MESSAGE_CHARS = 100_000


class SectionSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="The rendered block (stored text escaped), or empty.")
    tokens = serializers.IntegerField()
    cap = serializers.IntegerField(help_text="Tokens this block was allowed.")
    items = serializers.ListField(child=serializers.DictField())
    omitted = serializers.IntegerField(help_text="Candidates left out to stay within the cap.")


class HistorySerializer(serializers.Serializer):
    messages = serializers.ListField(
        child=serializers.DictField(), help_text="Chat-format messages, oldest first."
    )
    message_ids = serializers.ListField(child=serializers.CharField())
    tokens = serializers.IntegerField()
    summary_applied = serializers.BooleanField()
    summary_in_session_memory = serializers.BooleanField(
        help_text="The compaction summary was moved into <session-memory> instead of a leading message."
    )
    cut_count = serializers.IntegerField()
    recalled = serializers.ListField(child=serializers.DictField())
    leaf_id = serializers.CharField(allow_null=True)
    off_reason = serializers.ChoiceField(
        choices=[CONVERSATION_MEMORY_OFF],
        allow_null=True,
        help_text="Why there is no history: conversation_memory_off when the agent's conversation_memory "
        "setting is off (turns are still stored; the message is then reserved, not in the history).",
    )


class ContextMemoryUserSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    canonical_id = serializers.CharField()
    display_name = serializers.CharField()


class ContextOutputSerializer(serializers.Serializer):
    agent = serializers.CharField()
    memory_user = ContextMemoryUserSerializer(allow_null=True)
    thread = serializers.UUIDField(allow_null=True)
    appended_message = serializers.UUIDField(allow_null=True)
    token_budget = serializers.IntegerField()
    tokens = serializers.IntegerField(help_text="Total of every part; never more than token_budget.")
    message_tokens = serializers.IntegerField(
        help_text="Reserved for the incoming message when not appended."
    )
    allocation = serializers.DictField(child=serializers.IntegerField())
    system_prompt = serializers.CharField()
    user_profile = SectionSerializer()
    session_memory = SectionSerializer()
    memory = SectionSerializer()
    procedures = SectionSerializer()
    history = HistorySerializer()
    timings_ms = serializers.DictField(
        child=serializers.FloatField(), help_text="Server time per part; query_embedding is inside memory."
    )


THREAD_ID = "4f2a9c1e-7b3d-4e5f-a6b7-c8d9e0f1a2b3"
_PROFILE = (
    "<user-profile>\nWhat is known about the person you are talking to (stored facts, most certain "
    "first):\n- name: Ada\n- city: Lisbon\n</user-profile>"
)
_SESSION = "<session-memory>\nState of this conversation:\n- timezone: WET\n</session-memory>"
CONTEXT_EXAMPLE = {
    "agent": "support-bot",
    "memory_user": {"id": ADA_ID, "canonical_id": "telegram:1001", "display_name": "Ada"},
    "thread": THREAD_ID,
    "appended_message": "5e2aa517-0c8f-4315-9873-26c941fd364c",
    "token_budget": 2000,
    "tokens": 102,
    "message_tokens": 0,
    "allocation": {
        "user_profile": 298,
        "session_memory": 298,
        "memory": 0,
        "procedures": 199,
        "history": 1205,
    },
    "system_prompt": f"{_PROFILE}\n\n{_SESSION}",
    "user_profile": {
        "text": _PROFILE,
        "tokens": 36,
        "cap": 298,
        "items": [
            {"id": FACT_EXAMPLE["id"], "key": "city", "value": "Lisbon", "fact_type": "user_preference"}
        ],
        "omitted": 0,
    },
    "session_memory": {
        "text": _SESSION,
        "tokens": 22,
        "cap": 298,
        "items": [{"key": "timezone", "value": "WET"}],
        "omitted": 0,
    },
    "memory": {"text": "", "tokens": 0, "cap": 0, "items": [], "omitted": 0},
    "procedures": {"text": "", "tokens": 0, "cap": 199, "items": [], "omitted": 0},
    "history": {
        "messages": [
            {"role": "user", "content": "I moved to Lisbon. My timezone is WET."},
            {"role": "assistant", "content": "Noted: Lisbon, WET."},
            {"role": "user", "content": "Any flights to Porto on Friday?"},
        ],
        "message_ids": [
            "9b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e61",
            "7e6d5c4b-3a29-4817-9f6e-5d4c3b2a1f83",
            "5e2aa517-0c8f-4315-9873-26c941fd364c",
        ],
        "tokens": 44,
        "summary_applied": False,
        "summary_in_session_memory": False,
        "cut_count": 0,
        "recalled": [],
        "leaf_id": "5e2aa517-0c8f-4315-9873-26c941fd364c",
        "off_reason": None,
    },
    "timings_ms": {
        "user_profile": 3.3,
        "session_memory": 2.5,
        "memory": 0.0,
        "procedures": 1.9,
        "history": 1.7,
    },
}


class ContextAssembleApi(APIView):
    """`POST /api/v1/context/`: the whole context of one agent turn in one round trip."""

    # Reading the context is allowed to read-only keys; `append` and identifying a new
    # person are writes, which the service refuses for them.
    read_only_safe = True

    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(required=False, help_text="Agent slug; implied by an agent-bound key.")
        memory_user = serializers.UUIDField(required=False)
        channel = serializers.CharField(required=False, max_length=50)
        external_id = serializers.CharField(required=False, max_length=255)
        profile = serializers.DictField(required=False)
        thread = serializers.UUIDField(required=False)
        channel_chat_id = serializers.CharField(required=False, max_length=255)
        message = serializers.CharField(
            required=False, allow_blank=True, max_length=MAX_MESSAGE_CHARS, trim_whitespace=False
        )
        token_budget = serializers.IntegerField(
            required=False, default=4000, min_value=100, max_value=MAX_TOKEN_BUDGET
        )
        append = serializers.BooleanField(required=False, default=False)
        idempotency_key = serializers.CharField(required=False, max_length=200)
        node = serializers.CharField(required=False, max_length=100)
        memory_mode = serializers.ChoiceField(
            choices=MEMORY_MODES,
            required=False,
            help_text="What a named node reads and appends to: its own messages (node) or the main "
            "conversation. Default: the agent's memory_mode.",
        )
        system_as = serializers.ChoiceField(
            choices=SYSTEM_AS_MODES,
            default="system",
            help_text="user: the blocks come as the history's first message, a user message with the "
            "stable id context-<thread id>, and system_prompt is empty.",
        )
        content_format = serializers.ChoiceField(
            choices=CONTENT_FORMATS,
            default="plain",
            help_text="How history messages with files come: plain (content a string, references in "
            "`files`), parts (OpenAI content parts: text, image_url, documents inlined as text) or "
            "anthropic (text and image blocks). Their tokens count against the budget either way.",
        )
        tool_format = serializers.ChoiceField(
            choices=TOOL_FORMATS,
            default="native",
            help_text="native: history tool calls and tool-role results; text: each call and its "
            "result as one assistant message `tool: <name>\\ninput: <json>\\noutput: <result>`, for "
            "models without tool roles.",
        )
        allocation = serializers.DictField(child=serializers.FloatField(), required=False)
        include = serializers.ListField(
            child=serializers.ChoiceField(choices=SECTIONS), required=False, allow_empty=False
        )

    @extend_schema(
        summary="Assemble the context of one agent turn",
        request=InputSerializer,
        responses={200: ContextOutputSerializer},
        examples=[
            OpenApiExample(
                "Ada's new message, appended and answered with her context",
                value={
                    "agent": "support-bot",
                    "channel": "telegram",
                    "external_id": "1001",
                    "thread": THREAD_ID,
                    "message": "Any flights to Porto on Friday?",
                    "append": True,
                    "token_budget": 2000,
                },
                request_only=True,
            ),
            OpenApiExample("The context", value=CONTEXT_EXAMPLE, response_only=True),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = context_assemble(principal=request.user, request=ContextRequest.from_validated(data))
        recall_served(context=result.context, metric=RECALLS_CONTEXT)
        return Response(context_result_data(result), status=status.HTTP_200_OK)


class RecallOutputSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["list", "key", "fuzzy", "query"])
    facts = FactOutputSerializer(many=True)
    procedures = ProcedureOutputSerializer(many=True)
    episodes = EpisodeOutputSerializer(many=True)


class RecallApi(APIView):
    """The `recall` tool: list, look up, fuzzy-match or search what the agent remembers."""

    read_only_safe = True

    class InputSerializer(ContextInputSerializer):
        key = serializers.CharField(max_length=255, required=False, allow_blank=True)
        query = serializers.CharField(max_length=1000, required=False, allow_blank=True)
        # Defaults: the agent's memory settings (recall_memory_type, recall_limit,
        # recall_min_confidence), all / 10 / 0.5 unless changed.
        memory_type = serializers.ChoiceField(choices=MEMORY_TYPES, required=False)
        limit = serializers.IntegerField(min_value=1, max_value=100, required=False)
        min_confidence = serializers.FloatField(min_value=0, max_value=1, required=False)
        semantic = serializers.BooleanField(
            default=True, help_text="Also match facts and procedures by meaning (embeddings)."
        )

    @extend_schema(
        summary="Recall facts, procedures and episodes (the `recall` tool)",
        request=InputSerializer,
        responses=RecallOutputSerializer,
        examples=[
            OpenApiExample(
                "Where does Ada live?",
                value={"agent": "support-bot", "memory_user": ADA_ID, "query": "where does she live"},
                request_only=True,
            ),
            OpenApiExample(
                "What was found",
                value={
                    "mode": "query",
                    "facts": [{**FACT_EXAMPLE, "similarity": 0.71}],
                    "procedures": [],
                    "episodes": [EPISODE_EXAMPLE],
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        context = memory_context_resolve(
            principal=request.user,
            agent=data.get("agent") or None,
            memory_user=data.get("memory_user"),
            thread=data.get("thread"),
        )
        defaults = memory_settings_for(context.agent)
        result = recall(
            context=context,
            key=data.get("key") or None,
            query=data.get("query") or None,
            memory_type=data.get("memory_type", defaults.recall_memory_type),
            limit=data.get("limit", defaults.recall_limit),
            min_confidence=data.get("min_confidence", defaults.recall_min_confidence),
            semantic=data["semantic"],
        )
        recall_served(context=context, metric=RECALLS_RECALL)
        if result.facts and request.user.can_write:
            # Read-only keys may recall; only writable keys leave access statistics behind.
            transaction.on_commit(lambda ids=[f.pk for f in result.facts]: fact_touch(fact_ids=ids))
        # The `recall` tool's result, read by a model (core.lib.escaping).
        return Response(
            strip_invisible_json(
                {
                    "mode": result.mode,
                    "facts": FactOutputSerializer(result.facts, many=True).data,
                    "procedures": ProcedureOutputSerializer(result.procedures, many=True).data,
                    "episodes": EpisodeOutputSerializer(result.episodes, many=True).data,
                }
            )
        )


_JSON_SCHEMA = {"type": "object", "description": "A JSON Schema of the arguments."}
_TOOL_ANNOTATIONS = {
    "type": "object",
    "properties": {
        "readOnlyHint": {"type": "boolean"},
        "destructiveHint": {"type": "boolean"},
        "openWorldHint": {"type": "boolean"},
    },
}
TOOL_SCHEMAS_RESPONSE = {
    "type": "array",
    "items": {
        "oneOf": [
            {
                "type": "object",
                "title": "OpenAI function tool",
                "required": ["type", "function"],
                "properties": {
                    "type": {"type": "string", "enum": ["function"]},
                    "function": {
                        "type": "object",
                        "required": ["name", "description", "parameters"],
                        "properties": {
                            "name": {"type": "string"},
                            "description": {"type": "string"},
                            "parameters": _JSON_SCHEMA,
                        },
                    },
                },
            },
            {
                "type": "object",
                "title": "Anthropic tool",
                "required": ["name", "description", "input_schema"],
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "input_schema": _JSON_SCHEMA,
                },
            },
            {
                "type": "object",
                "title": "MCP tool",
                "required": ["name", "description", "inputSchema"],
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "inputSchema": _JSON_SCHEMA,
                    "outputSchema": {"type": "object"},
                    "annotations": _TOOL_ANNOTATIONS,
                },
            },
        ]
    },
}


class ToolsApi(APIView):
    """The agent tools (identify_user, remember, recall, recall_memory, search, forget,
    history, context, record_turn) in a vendor's function-calling shape, ready to hand to
    a model unchanged: `?schema=openai` (the default: without `schema` the answer is the
    OpenAI list, as before), `anthropic` or `mcp` (what the MCP server lists). The JSON
    Schema `default`s of recall's memory_type / limit / min_confidence and of the episodic
    searches' top_k are the agent's memory settings (`?agent=slug`, or the key's agent)."""

    class FilterSerializer(StrictSerializer):
        schema = serializers.ChoiceField(choices=SCHEMAS, default=SCHEMA_OPENAI)
        agent = serializers.SlugField(max_length=100, required=False, allow_blank=True)

    @extend_schema(
        parameters=[
            OpenApiParameter("schema", str, enum=list(SCHEMAS), description="Vendor shape; default openai."),
            OpenApiParameter("agent", str, description="Agent whose recall defaults the schemas show."),
        ],
        responses={200: TOOL_SCHEMAS_RESPONSE},
        summary="List the agent tools' function schemas",
        examples=[
            OpenApiExample(
                "OpenAI shape (one tool of the list)",
                value=[
                    {
                        "type": "function",
                        "function": {
                            "name": "remember",
                            "description": "Remember a fact about the user, the conversation or the world.",
                            "parameters": {
                                "type": "object",
                                "properties": {"key": {"type": "string"}, "value": {}},
                                "required": ["key", "value"],
                            },
                        },
                    }
                ],
                response_only=True,
            )
        ],
    )
    def get(self, request):
        serializer = self.FilterSerializer(data=request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = agent_resolve_optional(request.user, data.get("agent") or None, create=False)
        return Response(tool_schemas(data["schema"], settings=memory_settings_for(agent)))


class OpenAIFunctionCallSerializer(StrictSerializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS)
    arguments = serializers.JSONField(
        required=False, help_text="The arguments as the JSON string the model wrote (or as an object)."
    )


class OpenAIToolCallSerializer(StrictSerializer):
    id = serializers.CharField(max_length=ID_MAX_CHARS)
    type = serializers.ChoiceField(choices=["function"], required=False)
    function = OpenAIFunctionCallSerializer()


class AnthropicToolUseSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["tool_use"])
    id = serializers.CharField(max_length=ID_MAX_CHARS)
    name = serializers.CharField(max_length=NAME_MAX_CHARS)
    input = serializers.DictField(required=False)
    # Members the SDK's ToolUseBlock carries (model_dump()); read and ignored.
    caller = serializers.JSONField(required=False, allow_null=True)
    toolset_name = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=200)
    cache_control = serializers.JSONField(required=False, allow_null=True)


class MCPToolCallSerializer(StrictSerializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS)
    arguments = serializers.DictField(required=False, allow_null=True)


class OpenAIToolMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["tool"])
    tool_call_id = serializers.CharField()
    content = serializers.CharField(help_text="The tool's JSON result, or the API's error body, as text.")


class AnthropicToolResultSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["tool_result"])
    tool_use_id = serializers.CharField()
    content = serializers.CharField(help_text="The tool's JSON result, or the API's error body, as text.")
    is_error = serializers.BooleanField(required=False, help_text="Present (true) when the tool failed.")


class MCPTextContentSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text"])
    text = serializers.CharField()


class MCPCallToolResultSerializer(serializers.Serializer):
    content = MCPTextContentSerializer(many=True)
    structuredContent = serializers.JSONField(
        required=False, help_text=f"The tool's result (absent on error); schema {OUTPUT_SCHEMA}."
    )
    isError = serializers.BooleanField()


class ToolCallApi(APIView):
    """Execute tool calls as a model wrote them: an OpenAI tool call, an Anthropic `tool_use`
    block or an MCP `{name, arguments}`, or a list of them (at most 32, run in order). Each
    is answered in its own shape (an OpenAI `tool` message, an Anthropic `tool_result` block,
    an MCP CallToolResult), ready to send back to the model. A failing tool (bad arguments,
    a row not visible to the key, a read-only key writing) is a result marked as an error
    holding the API's error body; only a body that is not a tool call is a 400."""

    # A call the database failed transiently (unreachable, a timeout, a deadlock) has
    # `retryable` and `retry_after` in its body, and the response a Retry-After header
    # (runtime.tool_calls.tool_backend_failure). Not in the docstring: that is the OpenAPI
    # description, which clients/typescript/openapi.json holds.

    # Reading tools run for read-only keys; the writing ones refuse them in their result.
    read_only_safe = True

    CallRequest = PolymorphicProxySerializer(
        component_name="ToolCallInput",
        serializers=[
            OpenAIToolCallSerializer,
            AnthropicToolUseSerializer,
            MCPToolCallSerializer,
            OpenAIToolCallSerializer(many=True),
            AnthropicToolUseSerializer(many=True),
            MCPToolCallSerializer(many=True),
        ],
        resource_type_field_name=None,
        many=False,
    )
    CallResponse = PolymorphicProxySerializer(
        component_name="ToolCallOutput",
        serializers=[
            OpenAIToolMessageSerializer,
            AnthropicToolResultSerializer,
            MCPCallToolResultSerializer,
            OpenAIToolMessageSerializer(many=True),
            AnthropicToolResultSerializer(many=True),
            MCPCallToolResultSerializer(many=True),
        ],
        resource_type_field_name=None,
        many=False,
    )

    @extend_schema(
        summary="Run tool calls as a model wrote them (OpenAI, Anthropic or MCP)",
        request=CallRequest,
        responses={200: CallResponse},
        examples=[
            OpenApiExample(
                "An OpenAI tool call",
                value={
                    "id": "call_7Qx2",
                    "type": "function",
                    "function": {
                        "name": "remember",
                        "arguments": '{"key": "city", "value": "Lisbon", "scope": "user", "memory_user": "'
                        + ADA_ID
                        + '"}',
                    },
                },
                request_only=True,
            ),
            OpenApiExample(
                "An Anthropic tool_use block",
                value={"type": "tool_use", "id": "toolu_01A9", "name": "recall", "input": {"key": "city"}},
                request_only=True,
            ),
            OpenApiExample(
                "The OpenAI tool message to send back",
                value={
                    "role": "tool",
                    "tool_call_id": "call_7Qx2",
                    "content": '{"outcome": "created", "fact": {"key": "city", "value": "Lisbon"}, '
                    '"previous": null}',
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request):
        body = request.data
        items = body if isinstance(body, list) else [body]
        if isinstance(body, list) and len(body) <= TOOL_CALLS_MAX:
            errors = {}
            for index, item in enumerate(items):
                item_errors = _tool_call_envelope_errors(item)
                if item_errors:
                    errors[str(index)] = item_errors
            if errors:
                raise serializers.ValidationError(errors)
        elif isinstance(body, dict):
            item_errors = _tool_call_envelope_errors(body)
            if item_errors:
                raise serializers.ValidationError(item_errors)
        calls, many = tool_calls_parse(body)
        results, retry_after = tool_calls_run(principal=request.user, calls=calls)
        # A call the database failed transiently: the back-off the API's 503 would have asked for.
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return Response(results if many else results[0], headers=headers)


def _tool_call_envelope_errors(item) -> dict | None:
    """Field errors of one call's envelope, read by its shape's serializer; None when valid
    (or when it is no shape at all, which runtime.tool_calls refuses with its own message)."""
    serializer_class = {
        SHAPE_OPENAI: OpenAIToolCallSerializer,
        SHAPE_ANTHROPIC: AnthropicToolUseSerializer,
        SHAPE_MCP: MCPToolCallSerializer,
    }.get(tool_call_shape(item))
    if serializer_class is None:
        return None
    serializer = serializer_class(data=item)
    return None if serializer.is_valid() else serializer.errors


class MemoryUserIdentifyApi(APIView):
    """The `identify_user` tool: find or create the person behind a channel identity and
    return what is known about them."""

    class InputSerializer(StrictSerializer):
        channel = serializers.CharField(max_length=50)
        external_id = serializers.CharField(max_length=255)
        profile = serializers.DictField(required=False)
        agent = serializers.SlugField(
            max_length=100, required=False, allow_blank=True, help_text="Limit recent episodes to this agent."
        )

    class OutputSerializer(serializers.Serializer):
        created = serializers.BooleanField()
        memory_user = MemoryUserOutputSerializer()
        facts = FactOutputSerializer(many=True)
        preferences = serializers.JSONField()
        episodes = EpisodeOutputSerializer(many=True)

    @extend_schema(
        summary="Identify the person behind a channel identity (the `identify_user` tool)",
        request=InputSerializer,
        responses={200: OutputSerializer, 201: OutputSerializer},
        examples=[
            OpenApiExample(
                "A Telegram user",
                value={
                    "channel": "telegram",
                    "external_id": "1001",
                    "profile": {"username": "ada"},
                    "agent": "support-bot",
                },
                request_only=True,
            ),
            OpenApiExample(
                "Known: what the agent knows about her",
                value={
                    "created": False,
                    "memory_user": MEMORY_USER_EXAMPLE,
                    "facts": [FACT_EXAMPLE],
                    "preferences": {"language": "pt"},
                    "episodes": [EPISODE_EXAMPLE],
                },
                response_only=True,
                status_codes=[200],
            ),
            OpenApiExample(
                "New: created now",
                value={
                    "created": True,
                    "memory_user": {
                        **MEMORY_USER_EXAMPLE,
                        "thread_count": 0,
                        "message_count": 0,
                        "preferences": {},
                    },
                    "facts": [],
                    "preferences": {},
                    "episodes": [],
                },
                response_only=True,
                status_codes=[201],
            ),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        slug = data.get("agent")
        agent = agent_resolve_optional(request.user, slug, create=False)
        result = memory_user_identify(
            workspace=request.user.workspace,
            channel=data["channel"],
            external_id=data["external_id"],
            profile=data.get("profile"),
            actor=request.user.actor,
        )
        memory_user = memory_user_get(principal=request.user, memory_user_id=result.memory_user.pk)
        context = memory_user_context(memory_user=memory_user, agent=agent)
        body = {
            "created": result.created,
            "memory_user": MemoryUserOutputSerializer(memory_user).data,
            "facts": FactOutputSerializer(context["facts"], many=True).data,
            "preferences": context["preferences"],
            "episodes": EpisodeOutputSerializer(context["episodes"], many=True).data,
        }
        # The `identify_user` tool's result, read by a model (core.lib.escaping).
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(strip_invisible_json(body), status=code)
