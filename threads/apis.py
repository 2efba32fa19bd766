from django.conf import settings
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import agent_resolve, reference_resolve, require_write
from core.api_views import BatchDeleteApi, ListApi, RetrieveUpdateDestroyApi
from core.errors import NotFoundError
from core.memory_settings import MEMORY_MODES
from core.pagination import LimitOffsetPagination, paginate
from core.serializers import INT_MAX, StrictSerializer
from identities.models import MemoryUser
from threads.filters import ThreadFilter
from threads.lib.parts import CONTENT_FORMATS
from threads.lib.validation import (
    FILE_OWNERS,
    FILE_TRANSFER_METHODS,
    FILE_TYPES,
    IMAGE_DETAILS,
    IMAGE_MIME_TYPES,
    ROLES,
)
from threads.selectors import (
    CONVERSATION_MEMORY_OFF,
    TOOL_FORMATS,
    WINDOW_FALLBACK,
    WINDOW_STANDARD,
    iteration_log_list,
    message_get,
    message_history_window,
    message_list,
    run_snapshot_get,
    thread_get,
    thread_list,
    thread_plan_get,
    thread_plan_versions,
    transfer_list,
)
from threads.services import (
    MEMORY_USER_UNKNOWN,
    iteration_log_append,
    run_snapshot_put,
    thread_append_messages,
    thread_batch_delete,
    thread_compact_request,
    thread_create,
    thread_delete,
    thread_messages_clear,
    thread_plan_set,
    thread_resolve_or_create,
    thread_update,
    transfer_record,
)

ADA_ID = "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01"
THREAD_ID = "4f2a9c1e-7b3d-4e5f-a6b7-c8d9e0f1a2b3"
USER_MESSAGE_ID = "9b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e61"
TOOL_MESSAGE_ID = "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e72"
THREAD_EXAMPLE = {
    "id": THREAD_ID,
    "agent": "support-bot",
    "memory_user": ADA_ID,
    "channel": "telegram",
    "channel_chat_id": "chat-1001",
    "client_key": "",
    "title": "Moving to Lisbon",
    "metadata": {"locale": "en"},
    "model": "gpt-4o",
    "message_count": 4,
    "summary": None,
    "last_activity_at": "2026-11-23T14:40:53.454944Z",
    "created_at": "2026-11-23T14:40:52.958604Z",
    "updated_at": "2026-11-23T14:40:52.958891Z",
}
THREAD_RESPONSE = OpenApiExample("A thread", value=THREAD_EXAMPLE, response_only=True)
MESSAGE_EXAMPLE = {
    "id": USER_MESSAGE_ID,
    "thread_id": THREAD_ID,
    "parent_id": None,
    "role": "user",
    "content": "I moved to Lisbon. My timezone is WET.",
    "tool_calls": [],
    "tool_call_id": "",
    "name": "",
    "files": [],
    "node_id": "",
    "author_agent": "",
    "delegation_id": "",
    "metadata": {},
    "idempotency_key": "tg-1001-5531",
    "token_count": 15,
    "depth": 0,
    "seq": 1,
    "archived": False,
    "created_at": "2026-11-23T14:40:52.961779Z",
}
TOOL_RESULT_EXAMPLE = {
    **MESSAGE_EXAMPLE,
    "id": TOOL_MESSAGE_ID,
    "parent_id": "7e6d5c4b-3a29-4817-9f6e-5d4c3b2a1f83",
    "role": "tool",
    "content": '{"flights": [{"from": "LIS", "to": "OPO", "price": 49}]}',
    "tool_call_id": "call-1",
    "idempotency_key": "",
    "token_count": 21,
    "depth": 2,
    "seq": 3,
}


def memory_user_lookup(*, principal, memory_user_id):
    """A memory user of the caller's workspace, followed to its merge target; None for None."""
    # People belong to the workspace as a whole (no agent field): every key of it sees them.
    return reference_resolve(
        MemoryUser.objects.select_related("merged_into"),
        principal,
        memory_user_id,
        agent_field=None,
        not_found=NotFoundError(MEMORY_USER_UNKNOWN, fields={"memory_user": [MEMORY_USER_UNKNOWN]}),
    )


class ThreadSummaryOutputSerializer(serializers.Serializer):
    text = serializers.CharField()
    upto_message_id = serializers.UUIDField(allow_null=True, help_text="The last message it covers.")
    tokens = serializers.IntegerField()
    method = serializers.CharField()
    compacted_at = serializers.DateTimeField(allow_null=True)


class ThreadOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug")
    memory_user = serializers.UUIDField(source="memory_user_id", allow_null=True)
    channel = serializers.CharField()
    channel_chat_id = serializers.CharField()
    client_key = serializers.CharField()
    title = serializers.CharField()
    metadata = serializers.JSONField()
    model = serializers.CharField()
    message_count = serializers.IntegerField()
    summary = serializers.SerializerMethodField()
    last_activity_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(ThreadSummaryOutputSerializer(allow_null=True))
    def get_summary(self, thread) -> dict | None:
        if not thread.summary:
            return None
        return {
            "text": thread.summary,
            "upto_message_id": str(thread.summary_upto_id) if thread.summary_upto_id else None,
            "tokens": thread.summary_tokens,
            "method": thread.summary_method,
            "compacted_at": thread.compacted_at,
        }


class MessageOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    parent_id = serializers.UUIDField(allow_null=True)
    role = serializers.CharField()
    content = serializers.CharField()
    tool_calls = serializers.JSONField()
    tool_call_id = serializers.CharField()
    name = serializers.CharField()
    files = serializers.JSONField()
    node_id = serializers.CharField()
    author_agent = serializers.CharField()
    delegation_id = serializers.CharField()
    metadata = serializers.JSONField()
    idempotency_key = serializers.CharField()
    token_count = serializers.IntegerField()
    depth = serializers.IntegerField()
    seq = serializers.IntegerField()
    archived = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class AppendedMessageOutputSerializer(serializers.Serializer):
    """What an append returns per message: its identity and position, not an echo of the
    content (a batch of 500 long messages would otherwise be sent back whole)."""

    id = serializers.UUIDField()
    parent_id = serializers.UUIDField(allow_null=True)
    role = serializers.CharField()
    node_id = serializers.CharField()
    seq = serializers.IntegerField()
    depth = serializers.IntegerField()
    token_count = serializers.IntegerField()
    archived = serializers.BooleanField()
    idempotency_key = serializers.CharField()
    created_at = serializers.DateTimeField()
    duplicate = serializers.BooleanField(help_text="True when the idempotency key was seen before.")


@extend_schema_view(get=extend_schema(summary="List threads", examples=[THREAD_RESPONSE]))
class ThreadListApi(ListApi):
    selector = thread_list
    OutputSerializer = ThreadOutputSerializer
    filterset_class = ThreadFilter
    operation_id = "threads_list"

    @extend_schema_serializer(component_name="ThreadListFilter")
    class FilterSerializer(StrictSerializer):
        # Documentation only: ThreadFilter validates the query string.
        pass

    @extend_schema_serializer(component_name="ThreadListInput")
    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(required=False, help_text="Agent slug; implied by an agent-bound key.")
        memory_user = serializers.UUIDField(required=False, allow_null=True)
        channel = serializers.CharField(max_length=50, required=False, allow_blank=True)
        channel_chat_id = serializers.CharField(max_length=255, required=False, allow_blank=True)
        client_key = serializers.CharField(max_length=255, required=False, allow_blank=True)
        title = serializers.CharField(max_length=300, required=False, allow_blank=True)
        metadata = serializers.DictField(required=False)
        model = serializers.CharField(max_length=200, required=False, allow_blank=True)
        resolve = serializers.BooleanField(
            default=False,
            help_text="Return the existing thread of (agent, memory user, channel chat id) if any.",
        )

    @extend_schema(
        summary="Start a thread (or resolve the existing one of a chat)",
        request=InputSerializer,
        responses={201: ThreadOutputSerializer, 200: ThreadOutputSerializer},
        examples=[
            OpenApiExample(
                "Ada's Telegram chat, reused when it exists",
                value={
                    "agent": "support-bot",
                    "memory_user": ADA_ID,
                    "channel": "telegram",
                    "channel_chat_id": "chat-1001",
                    "title": "Moving to Lisbon",
                    "resolve": True,
                },
                request_only=True,
            ),
            THREAD_RESPONSE,
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        principal = request.user
        agent = agent_resolve(principal, data.pop("agent", None))
        memory_user = memory_user_lookup(principal=principal, memory_user_id=data.pop("memory_user", None))
        resolve = data.pop("resolve")
        if resolve:
            thread, created = thread_resolve_or_create(
                workspace=principal.workspace, agent=agent, memory_user=memory_user, **data
            )
        else:
            thread = thread_create(
                workspace=principal.workspace, agent=agent, memory_user=memory_user, **data
            )
            created = True
        return Response(
            ThreadOutputSerializer(thread).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


@extend_schema_view(
    get=extend_schema(summary="Get a thread", examples=[THREAD_RESPONSE]),
    patch=extend_schema(
        summary="Retitle a thread or change its metadata",
        examples=[
            OpenApiExample(
                "A new title",
                value={"title": "Moving to Lisbon", "metadata": {"locale": "en"}},
                request_only=True,
            ),
            THREAD_RESPONSE,
        ],
    ),
    delete=extend_schema(summary="Delete a thread with its messages and checkpoints"),
)
class ThreadDetailApi(RetrieveUpdateDestroyApi):
    selector = thread_get
    update_service = thread_update
    delete_service = thread_delete
    OutputSerializer = ThreadOutputSerializer

    @extend_schema_serializer(component_name="ThreadDetailInput")
    class InputSerializer(StrictSerializer):
        title = serializers.CharField(max_length=300, required=False, allow_blank=True)
        metadata = serializers.DictField(required=False)
        model = serializers.CharField(max_length=200, required=False, allow_blank=True)
        channel = serializers.CharField(max_length=50, required=False, allow_blank=True)
        client_key = serializers.CharField(max_length=255, required=False, allow_blank=True)


@extend_schema_view(
    post=extend_schema(
        summary="Delete several threads",
        examples=[
            OpenApiExample(
                "Two threads",
                value={"ids": [THREAD_ID, "8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d"]},
                request_only=True,
            ),
            OpenApiExample(
                "Deleted",
                value={"deleted": 2, "threads": 2, "messages": 31, "checkpoints": 4},
                response_only=True,
            ),
        ],
    )
)
class ThreadBatchDeleteApi(BatchDeleteApi):
    service = thread_batch_delete

    @extend_schema_serializer(component_name="ThreadBatchDeleteOutput")
    class OutputSerializer(serializers.Serializer):
        deleted = serializers.IntegerField()
        threads = serializers.IntegerField()
        messages = serializers.IntegerField()
        checkpoints = serializers.IntegerField()


@extend_schema_serializer(component_name="MessageFile")
class MessageFileSerializer(StrictSerializer):
    """One file reference (docs/threads.md, "Files"). An image carries an http(s) `url` (passed
    on to the model, never fetched) or base64 `data` with its `mime_type`; a document carries
    its extracted `text` (or a `url`); Dify's `transfer_method` / `file_id` references are kept
    as they are. The history's `content_format=parts` renders them as content parts."""

    # Documents the body only, like MessageInputSerializer: threads.lib.validation checks it.
    type = serializers.ChoiceField(choices=FILE_TYPES)
    transfer_method = serializers.ChoiceField(
        choices=FILE_TRANSFER_METHODS,
        required=False,
        help_text="Default: remote_url with `url`, inline with `data` or `text`, else local_file.",
    )
    url = serializers.CharField(
        required=False, help_text="http(s), at most 2000 characters; or a base64 data: URL of an image."
    )
    data = serializers.CharField(
        required=False,
        help_text="An image's bytes in base64 (THREADS_FILE_DATA_MAX_BYTES decoded; over: 413).",
    )
    mime_type = serializers.CharField(
        required=False, help_text=f"Required with `data`: one of {', '.join(IMAGE_MIME_TYPES)}."
    )
    detail = serializers.ChoiceField(choices=IMAGE_DETAILS, required=False, help_text="Images; default auto.")
    name = serializers.CharField(required=False, max_length=255)
    filename = serializers.CharField(required=False, max_length=255)
    text = serializers.CharField(
        required=False, help_text="A document's extracted text (THREADS_FILE_TEXT_MAX_CHARS; over: 413)."
    )
    file_id = serializers.CharField(required=False, max_length=2000)
    belongs_to = serializers.ChoiceField(choices=FILE_OWNERS, required=False)
    size = serializers.IntegerField(required=False, min_value=0)


@extend_schema_serializer(component_name="MessageInput")
class MessageInputSerializer(StrictSerializer):
    """One message to append. `content` is required unless the message carries `tool_calls`
    (assistant messages: {id, name, arguments} or OpenAI's {id, type, function}) or `files`
    (image URLs or base64 data, document text, or references); a tool result names the call
    it answers in `tool_call_id`. `parent` defaults to the node's newest message; the same
    `idempotency_key` again answers the stored message (200) instead of storing a new one."""

    # Documents the body only: the service checks each message (threads.lib.validation),
    # since other tiers append messages too; the limits here are the ones it applies.
    id = serializers.UUIDField(required=False)
    role = serializers.ChoiceField(choices=ROLES)
    content = serializers.CharField(
        required=False, allow_blank=True, max_length=settings.THREADS_MAX_CONTENT_CHARS
    )
    name = serializers.CharField(required=False, allow_blank=True, max_length=100)
    parent = serializers.UUIDField(required=False, allow_null=True)
    node_id = serializers.CharField(required=False, allow_blank=True, max_length=100)
    idempotency_key = serializers.CharField(required=False, allow_blank=True, max_length=200)
    tool_calls = serializers.ListField(child=serializers.DictField(), required=False)
    tool_call_id = serializers.CharField(required=False, allow_blank=True, max_length=100)
    files = MessageFileSerializer(many=True, required=False)
    metadata = serializers.DictField(required=False)
    created_at = serializers.DateTimeField(required=False)
    author_agent = serializers.CharField(required=False, allow_blank=True, max_length=100)
    delegation_id = serializers.CharField(required=False, allow_blank=True, max_length=100)

    # threads.lib.validation refuses a message with neither.
    required_any_of = (("content",), ("tool_calls",), ("files",))


class MessageListApi(APIView):
    pagination_class = LimitOffsetPagination

    @extend_schema_serializer(component_name="MessageListInput")
    class InputSerializer(StrictSerializer):
        messages = MessageInputSerializer(many=True, allow_empty=False)

    # The three bodies an append accepts: one message, the envelope, or a bare list.
    AppendRequest = PolymorphicProxySerializer(
        component_name="MessageAppendInput",
        serializers=[MessageInputSerializer, InputSerializer, MessageInputSerializer(many=True)],
        resource_type_field_name=None,
        many=False,
    )

    @extend_schema_serializer(component_name="MessageListFilter")
    class FilterSerializer(StrictSerializer):
        node = serializers.CharField(max_length=100, required=False, allow_blank=True)
        limit = serializers.IntegerField(required=False)
        offset = serializers.IntegerField(required=False)

    @extend_schema_serializer(component_name="MessageListAppendOutput")
    class AppendOutputSerializer(serializers.Serializer):
        messages = AppendedMessageOutputSerializer(many=True)

    @extend_schema(
        summary="List a thread's messages, oldest first",
        parameters=[OpenApiParameter("node", str, description="Only this node's messages.")],
        responses=MessageOutputSerializer(many=True),
        operation_id="thread_messages_list",
        examples=[OpenApiExample("A message", value=MESSAGE_EXAMPLE, response_only=True)],
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        params = self.FilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        return paginate(
            queryset=message_list(thread=thread, node=params.validated_data.get("node")),
            serializer_class=MessageOutputSerializer,
            request=request,
            view=self,
        )

    @extend_schema(
        summary="Append one message or a batch to a thread",
        request=AppendRequest,
        responses={201: AppendOutputSerializer, 200: AppendOutputSerializer},
        examples=[
            OpenApiExample(
                "One message",
                value={
                    "role": "user",
                    "content": "I moved to Lisbon. My timezone is WET.",
                    "idempotency_key": "tg-1001-5531",
                },
                request_only=True,
            ),
            OpenApiExample(
                "A turn with a tool call",
                value={
                    "messages": [
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [
                                {
                                    "id": "call-1",
                                    "type": "function",
                                    "function": {"name": "search_flights", "arguments": '{"to": "OPO"}'},
                                }
                            ],
                        },
                        {
                            "role": "tool",
                            "tool_call_id": "call-1",
                            "content": '{"flights": [{"from": "LIS", "to": "OPO", "price": 49}]}',
                        },
                    ]
                },
                request_only=True,
            ),
            OpenApiExample(
                "Stored",
                value={
                    "messages": [
                        {
                            "id": USER_MESSAGE_ID,
                            "parent_id": None,
                            "role": "user",
                            "node_id": "",
                            "seq": 1,
                            "depth": 0,
                            "token_count": 15,
                            "archived": False,
                            "idempotency_key": "tg-1001-5531",
                            "created_at": "2026-11-23T14:40:52.961779Z",
                            "duplicate": False,
                        }
                    ]
                },
                response_only=True,
            ),
        ],
        description='Append one message (send the message object) or a batch (`{"messages": [...]}` '
        "or a bare list), atomically. 201 when anything was stored; 200 when every message was a "
        "replay of its idempotency key.",
    )
    def post(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        body = request.data
        if isinstance(body, dict) and "messages" in body and "role" not in body:
            # Each message is validated by the service (other tiers call it directly too);
            # only the envelope is checked here.
            unknown = sorted(set(body) - {"messages"})
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
            payload = body["messages"]
        elif isinstance(body, dict):
            payload = [body]
        else:
            payload = body
        stored = thread_append_messages(thread=thread, messages=payload, actor=request.user.actor)
        created = any(not m.duplicate for m in stored)
        return Response(
            {"messages": AppendedMessageOutputSerializer(stored, many=True).data},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema_serializer(component_name="MessageClearOutput")
    class ClearOutputSerializer(serializers.Serializer):
        deleted = serializers.IntegerField()

    @extend_schema(
        summary="Clear one node's messages from a thread",
        parameters=[OpenApiParameter("node", str, required=True, description="The node to clear.")],
        responses={200: ClearOutputSerializer},
        examples=[OpenApiExample("Cleared", value={"deleted": 6}, response_only=True)],
    )
    def delete(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        require_write(request.user)
        deleted = thread_messages_clear(
            thread=thread, node_id=request.query_params.get("node", ""), actor=request.user.actor
        )
        return Response({"deleted": deleted})


class MessageDetailApi(APIView):
    @extend_schema(
        summary="Get one message",
        responses=MessageOutputSerializer,
        examples=[OpenApiExample("A message", value=MESSAGE_EXAMPLE, response_only=True)],
    )
    def get(self, request, thread_id, message_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        return Response(MessageOutputSerializer(message_get(thread=thread, message_id=message_id)).data)


class ToolResultDetailApi(APIView):
    """An archived (or any) tool result, whole: the id the history window's reference names."""

    @extend_schema(
        summary="Get a tool result whole, archived or not",
        responses=MessageOutputSerializer,
        examples=[OpenApiExample("A tool result", value=TOOL_RESULT_EXAMPLE, response_only=True)],
    )
    def get(self, request, thread_id, message_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        message = message_get(thread=thread, message_id=message_id)
        if message.role != "tool":
            raise NotFoundError("Tool result not found.")
        return Response(MessageOutputSerializer(message).data)


class ThreadHistoryApi(APIView):
    @extend_schema_serializer(component_name="ThreadHistoryFilter")
    class FilterSerializer(StrictSerializer):
        leaf = serializers.UUIDField(required=False)
        node = serializers.CharField(max_length=100, required=False, allow_blank=True)
        max_tokens = serializers.IntegerField(required=False, min_value=1, max_value=10_000_000)
        max_messages = serializers.IntegerField(required=False, min_value=1, max_value=10_000)
        delegation = serializers.CharField(max_length=100, required=False)
        files = serializers.ChoiceField(choices=["include", "omit"], default="include")
        content_format = serializers.ChoiceField(
            choices=CONTENT_FORMATS,
            default="plain",
            help_text="plain: content is a string and file references come in `files`; parts: a "
            "message with files has OpenAI content parts (text, image_url; documents inlined as "
            "text); anthropic: the same with Anthropic image blocks.",
        )
        system_as = serializers.ChoiceField(choices=["system", "user"], default="system")
        memory_mode = serializers.ChoiceField(
            choices=MEMORY_MODES,
            required=False,
            help_text="What a named node reads: its own messages (node) or the main conversation. "
            "Default: the agent's memory_mode.",
        )
        semantic_recall = serializers.BooleanField(
            required=False, allow_null=True, default=None, help_text="Default: the agent's setting."
        )
        recall_query = serializers.CharField(
            max_length=4000, required=False, help_text="Default: the newest user message."
        )
        recall_query_by_person = serializers.BooleanField(
            default=False,
            help_text='`recall_query` is the person\'s own words: its "I", "me" and "my" are the '
            "person, as they are in the newest user message (the default query).",
        )
        agent = serializers.SlugField(
            max_length=100,
            required=False,
            help_text="Read the window as this agent sees it after transfers: an agent that "
            "transferred the thread away (not shared) stops seeing other agents' later turns.",
        )
        tool_format = serializers.ChoiceField(
            choices=TOOL_FORMATS,
            default="native",
            help_text="native: tool calls and tool-role results; text: each call and its result "
            "as one assistant message `tool: <name>\\ninput: <json>\\noutput: <result>`.",
        )

    @extend_schema_serializer(component_name="ThreadHistoryOutput")
    class OutputSerializer(serializers.Serializer):
        messages = serializers.ListField(child=serializers.DictField())
        message_ids = serializers.ListField(child=serializers.CharField())
        tokens = serializers.IntegerField()
        summary_applied = serializers.BooleanField()
        summary_id = serializers.CharField(allow_null=True)
        cut_count = serializers.IntegerField()
        recalled = serializers.ListField(child=serializers.DictField())
        leaf_id = serializers.CharField(allow_null=True)
        max_tokens = serializers.IntegerField()
        max_messages = serializers.IntegerField()
        memory_mode = serializers.ChoiceField(choices=MEMORY_MODES)
        node = serializers.CharField(allow_null=True, help_text="The node read; null: the main conversation.")
        off_reason = serializers.ChoiceField(
            choices=[CONVERSATION_MEMORY_OFF],
            allow_null=True,
            help_text="Why there are no messages: conversation_memory_off when the agent's "
            "conversation_memory setting is off (turns are still stored).",
        )
        window = serializers.ChoiceField(
            choices=[WINDOW_STANDARD, WINDOW_FALLBACK],
            help_text="fallback: the agent's fixed fallback window (no summarizer model configured).",
        )
        agent = serializers.CharField(allow_null=True, help_text="The agent whose view this is.")
        handed_away_at = serializers.IntegerField(
            allow_null=True, help_text="Depth after which other agents' turns are hidden from `agent`."
        )

    @extend_schema(
        summary="Read the history window that fits a token budget",
        parameters=[FilterSerializer],
        responses=OutputSerializer,
        examples=[
            OpenApiExample(
                "The last turn",
                value={
                    "messages": [
                        {"role": "user", "content": "I moved to Lisbon. My timezone is WET."},
                        {"role": "assistant", "content": "Noted: Lisbon, WET."},
                    ],
                    "message_ids": [USER_MESSAGE_ID, "7e6d5c4b-3a29-4817-9f6e-5d4c3b2a1f83"],
                    "tokens": 29,
                    "summary_applied": False,
                    "summary_id": None,
                    "cut_count": 0,
                    "recalled": [],
                    "leaf_id": "7e6d5c4b-3a29-4817-9f6e-5d4c3b2a1f83",
                    "max_tokens": 2000,
                    "max_messages": 20,
                    "memory_mode": "node",
                    "node": None,
                    "off_reason": None,
                    "window": "standard",
                    "agent": None,
                    "handed_away_at": None,
                },
                response_only=True,
            )
        ],
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        params = self.FilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        window = message_history_window(thread=thread, **params.validated_data)
        return Response(self.OutputSerializer(window.as_dict()).data)


class ThreadCompactApi(APIView):
    @extend_schema_serializer(component_name="ThreadCompactInput")
    class InputSerializer(StrictSerializer):
        node = serializers.CharField(
            max_length=100,
            required=False,
            allow_blank=True,
            help_text="Compact this node's (a delegated sub-agent's) history into its own summary "
            "instead of the main conversation's.",
        )

    @extend_schema_serializer(component_name="ThreadCompactOutput")
    class OutputSerializer(serializers.Serializer):
        status = serializers.CharField()
        thread_id = serializers.UUIDField()
        node = serializers.CharField(
            allow_null=True, help_text="The node compacted; null: the main conversation."
        )

    @extend_schema(
        summary="Queue a compaction of the thread's (or one node's) old turns into a summary",
        request=InputSerializer,
        responses={202: OutputSerializer},
        examples=[
            OpenApiExample("One sub-agent's history", value={"node": "researcher"}, request_only=True),
            OpenApiExample(
                "Queued",
                value={"status": "queued", "thread_id": THREAD_ID, "node": None},
                response_only=True,
                status_codes=[202],
            ),
        ],
    )
    def post(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        node = serializer.validated_data.get("node") or ""
        thread_compact_request(thread=thread, node=node)
        return Response(
            {"status": "queued", "thread_id": str(thread.pk), "node": node or None},
            status=status.HTTP_202_ACCEPTED,
        )


PLAN_RESPONSE = OpenApiExample(
    "A plan version",
    value={
        "version": 2,
        "plan": {"steps": ["find flights", "book", "send the ticket"], "done": ["find flights"]},
        "actor": "api_key:support",
        "created_at": "2026-11-23T14:40:53.454339Z",
    },
    response_only=True,
)


class PlanOutputSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    plan = serializers.JSONField()
    actor = serializers.CharField()
    created_at = serializers.DateTimeField()


class ThreadPlanApi(APIView):
    @extend_schema_serializer(component_name="ThreadPlanInput")
    class InputSerializer(StrictSerializer):
        plan = serializers.JSONField()

    @extend_schema(
        summary="Get the thread's current plan", responses=PlanOutputSerializer, examples=[PLAN_RESPONSE]
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        return Response(PlanOutputSerializer(thread_plan_get(thread=thread)).data)

    @extend_schema(
        summary="Set the thread's plan (a new version)",
        request=InputSerializer,
        responses={201: PlanOutputSerializer},
        examples=[
            OpenApiExample(
                "Three steps, one done",
                value={
                    "plan": {"steps": ["find flights", "book", "send the ticket"], "done": ["find flights"]}
                },
                request_only=True,
            ),
            PLAN_RESPONSE,
        ],
    )
    def put(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = thread_plan_set(
            thread=thread, plan=serializer.validated_data["plan"], actor=request.user.actor
        )
        return Response(PlanOutputSerializer(version).data, status=status.HTTP_201_CREATED)


class ThreadPlanVersionsApi(APIView):
    pagination_class = LimitOffsetPagination

    @extend_schema(
        summary="List the plan's versions, newest first",
        responses=PlanOutputSerializer(many=True),
        examples=[PLAN_RESPONSE],
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        return paginate(
            queryset=thread_plan_versions(thread=thread),
            serializer_class=PlanOutputSerializer,
            request=request,
            view=self,
        )


RUN_SNAPSHOT_RESPONSE = OpenApiExample(
    "A snapshot",
    value={
        "run_id": "run-2026-11-23-a",
        "snapshot": {"step": 2, "pending": ["book"]},
        "created_at": "2026-11-23T14:40:53.449136Z",
        "updated_at": "2026-11-23T14:41:10.102311Z",
    },
    response_only=True,
)


class RunSnapshotApi(APIView):
    @extend_schema_serializer(component_name="RunSnapshotInput")
    class InputSerializer(StrictSerializer):
        snapshot = serializers.JSONField()

    @extend_schema_serializer(component_name="RunSnapshotOutput")
    class OutputSerializer(serializers.Serializer):
        run_id = serializers.CharField()
        snapshot = serializers.JSONField()
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()

    @extend_schema(
        summary="Get a run's snapshot", responses=OutputSerializer, examples=[RUN_SNAPSHOT_RESPONSE]
    )
    def get(self, request, thread_id, run_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        return Response(self.OutputSerializer(run_snapshot_get(thread=thread, run_id=run_id)).data)

    @extend_schema(
        summary="Save a run's snapshot (replacing the previous one)",
        request=InputSerializer,
        responses={200: OutputSerializer, 201: OutputSerializer},
        examples=[
            OpenApiExample(
                "Step 2 of the run", value={"snapshot": {"step": 2, "pending": ["book"]}}, request_only=True
            ),
            RUN_SNAPSHOT_RESPONSE,
        ],
    )
    def put(self, request, thread_id, run_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        snapshot, created = run_snapshot_put(
            thread=thread, run_id=run_id, snapshot=serializer.validated_data["snapshot"]
        )
        return Response(
            self.OutputSerializer(snapshot).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


ITERATION_RESPONSE = OpenApiExample(
    "An attempt",
    value={
        "id": 2,
        "task": "fetch-prices",
        "attempt": 2,
        "outcome": "retry",
        "error": "upstream timeout",
        "detail": {"source": "flights-api"},
        "at": "2026-11-23T14:40:54.508452Z",
    },
    response_only=True,
)


class IterationListApi(APIView):
    pagination_class = LimitOffsetPagination

    @extend_schema_serializer(component_name="IterationListInput")
    class InputSerializer(StrictSerializer):
        task = serializers.CharField(max_length=200)
        outcome = serializers.ChoiceField(choices=["success", "failure", "retry", "skipped"])
        error = serializers.CharField(required=False, allow_blank=True, max_length=20_000)
        attempt = serializers.IntegerField(required=False, min_value=1, max_value=INT_MAX)
        detail = serializers.DictField(required=False)
        at = serializers.DateTimeField(required=False)

    @extend_schema_serializer(component_name="IterationListOutput")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        task = serializers.CharField(source="task_key")
        attempt = serializers.IntegerField()
        outcome = serializers.CharField()
        error = serializers.CharField()
        detail = serializers.JSONField()
        at = serializers.DateTimeField()

    @extend_schema(
        summary="List the thread's iteration log",
        parameters=[OpenApiParameter("task", str, description="Only this task's attempts.")],
        responses=OutputSerializer(many=True),
        examples=[ITERATION_RESPONSE],
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        return paginate(
            queryset=iteration_log_list(thread=thread, task_key=request.query_params.get("task")),
            serializer_class=self.OutputSerializer,
            request=request,
            view=self,
        )

    @extend_schema(
        summary="Log one attempt of a task",
        request=InputSerializer,
        responses={201: OutputSerializer},
        examples=[
            OpenApiExample(
                "A retry after a timeout",
                value={
                    "task": "fetch-prices",
                    "outcome": "retry",
                    "attempt": 2,
                    "error": "upstream timeout",
                    "detail": {"source": "flights-api"},
                },
                request_only=True,
            ),
            ITERATION_RESPONSE,
        ],
    )
    def post(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        log = iteration_log_append(thread=thread, task_key=data.pop("task"), **data)
        return Response(self.OutputSerializer(log).data, status=status.HTTP_201_CREATED)


TRANSFER_EXAMPLE = {
    "id": 7,
    "thread_id": THREAD_ID,
    "from_agent": "support-bot",
    "to_agent": "billing-bot",
    "reason": "Refund question",
    "message": "7e6d5c4b-3a29-4817-9f6e-5d4c3b2a1f83",
    "message_depth": 3,
    "shared": False,
    "actor": "api_key:support",
    "created_at": "2026-11-23T14:41:02.118204Z",
}


class TransferOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    thread_id = serializers.UUIDField()
    from_agent = serializers.CharField()
    to_agent = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.UUIDField(source="message_id")
    message_depth = serializers.IntegerField()
    shared = serializers.BooleanField()
    actor = serializers.CharField()
    created_at = serializers.DateTimeField()


class TransferListApi(APIView):
    """Transfers of control between agents (Inkeep's transfer), honoured by `/history/?agent=`."""

    pagination_class = LimitOffsetPagination

    @extend_schema_serializer(component_name="TransferInput")
    class InputSerializer(StrictSerializer):
        from_agent = serializers.SlugField(
            max_length=100,
            required=False,
            help_text="Default (and only choice) for an agent-bound key: its agent.",
        )
        to_agent = serializers.SlugField(max_length=100)
        reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
        message = serializers.UUIDField(
            required=False,
            help_text="The last message handed over; default: the newest of the main conversation.",
        )
        shared = serializers.BooleanField(
            default=False,
            help_text="Both agents keep reading the main conversation whole "
            "(the sender still sees the receiver).",
        )

    @extend_schema(
        summary="List a thread's transfers between agents",
        responses=TransferOutputSerializer(many=True),
        examples=[OpenApiExample("A transfer", value=TRANSFER_EXAMPLE, response_only=True)],
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id)
        return paginate(
            request=request,
            queryset=transfer_list(thread=thread),
            serializer_class=TransferOutputSerializer,
            view=self,
        )

    @extend_schema(
        summary="Record a transfer of the thread from one agent to another",
        request=InputSerializer,
        responses={201: TransferOutputSerializer},
        examples=[
            OpenApiExample(
                "Hand over to billing",
                value={"from_agent": "support-bot", "to_agent": "billing-bot", "reason": "Refund question"},
                request_only=True,
            ),
            OpenApiExample("Recorded", value=TRANSFER_EXAMPLE, response_only=True, status_codes=[201]),
        ],
    )
    def post(self, request, thread_id):
        require_write(request.user)
        thread = thread_get(principal=request.user, thread_id=thread_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        transfer = transfer_record(
            principal=request.user,
            thread=thread,
            from_agent=values.get("from_agent"),
            to_agent=values["to_agent"],
            reason=values["reason"],
            message_id=values.get("message"),
            shared=values["shared"],
        )
        return Response(TransferOutputSerializer(transfer).data, status=status.HTTP_201_CREATED)
