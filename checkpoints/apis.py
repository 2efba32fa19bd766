import base64
import binascii

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.filters import CheckpointFilter
from checkpoints.selectors import (
    checkpoint_get,
    checkpoint_latest,
    checkpoint_list,
    checkpoint_list_for_thread,
)
from checkpoints.services import (
    checkpoint_batch_delete,
    checkpoint_put,
    checkpoint_thread_delete,
    checkpoint_writes_put,
)
from core.access import require_write
from core.api_views import BatchDeleteApi, ListApi
from core.pagination import LimitOffsetPagination, paginate
from core.serializers import StrictSerializer
from threads.selectors import thread_get

BASE64_INVALID = "Must be base64-encoded bytes."

THREAD_ID = "4f2a9c1e-7b3d-4e5f-a6b7-c8d9e0f1a2b3"
PENDING_WRITE_EXAMPLE = {
    "task_id": "task-1",
    "task_path": "",
    "idx": 0,
    "channel": "messages",
    "value": {"type": "msgpack", "data": "kqVoZWxsbw=="},
}
CHECKPOINT_EXAMPLE = {
    "id": "e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9",
    "thread_id": THREAD_ID,
    "checkpoint_ns": "",
    "checkpoint_id": "1ef9a2c4-7d3b-6e10-8002-3c1f0b2a9d11",
    "parent_checkpoint_id": "1ef9a2c4-7d3b-6e10-8001-9a8b7c6d5e4f",
    "checkpoint": {"type": "msgpack", "data": "g6F2AqJ0c6Q="},
    "metadata": {"source": "loop", "step": 2},
    "created_at": "2026-11-23T14:40:53.447857Z",
}
CHECKPOINT_RESPONSE = OpenApiExample(
    "A checkpoint with its pending writes",
    value={**CHECKPOINT_EXAMPLE, "pending_writes": [PENDING_WRITE_EXAMPLE]},
    response_only=True,
)
CHECKPOINTS_DELETED_RESPONSE = OpenApiExample(
    "Deleted", value={"deleted": 3, "writes": 5}, response_only=True
)


class Base64Field(serializers.CharField):
    """Bytes on the wire as standard base64 text."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def run_validation(self, data=serializers.empty):
        # CharField returns "" early for a blank value, skipping to_internal_value; empty
        # bytes are a legitimate value (LangGraph writes `("null", b"")`).
        if data == "":
            return b""
        return super().run_validation(data)

    def to_internal_value(self, data):
        text = super().to_internal_value(data)
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError(BASE64_INVALID)

    def to_representation(self, value):
        return base64.b64encode(bytes(value)).decode("ascii")


class TypedValueSerializer(StrictSerializer):
    type = serializers.CharField(max_length=50)
    data = Base64Field()


class PendingWriteOutputSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    task_path = serializers.CharField()
    idx = serializers.IntegerField()
    channel = serializers.CharField()
    value = serializers.SerializerMethodField()

    def get_value(self, write) -> dict:
        return {"type": write.type, "data": base64.b64encode(bytes(write.data)).decode("ascii")}


class CheckpointOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    checkpoint_ns = serializers.CharField()
    checkpoint_id = serializers.CharField()
    parent_checkpoint_id = serializers.CharField(allow_null=True)
    checkpoint = serializers.SerializerMethodField()
    metadata = serializers.JSONField()
    created_at = serializers.DateTimeField()

    def get_checkpoint(self, obj) -> dict:
        return {"type": obj.type, "data": base64.b64encode(bytes(obj.data)).decode("ascii")}


class CheckpointWithWritesOutputSerializer(CheckpointOutputSerializer):
    pending_writes = PendingWriteOutputSerializer(many=True, source="writes.all")


NS_PARAMETER = OpenApiParameter("checkpoint_ns", str, description='Namespace (default: the root, "").')


def _namespace(request) -> str:
    return request.query_params.get("checkpoint_ns", "")


class ThreadCheckpointListApi(APIView):
    pagination_class = LimitOffsetPagination

    @extend_schema_serializer(component_name="ThreadCheckpointListInput")
    class InputSerializer(StrictSerializer):
        checkpoint_ns = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
        checkpoint_id = serializers.CharField(max_length=255)
        parent_checkpoint_id = serializers.CharField(max_length=255, required=False, allow_null=True)
        checkpoint = TypedValueSerializer()
        metadata = serializers.DictField(required=False, default=dict)

    @extend_schema(
        summary="List a thread's checkpoints, newest first",
        examples=[CHECKPOINT_RESPONSE],
        parameters=[
            OpenApiParameter("checkpoint_ns", str, description="Namespace; absent lists every namespace."),
            OpenApiParameter("before", str, description="Only checkpoints older than this checkpoint id."),
            OpenApiParameter("metadata", str, description="JSON object the metadata must contain."),
            OpenApiParameter("limit", int),
        ],
        responses=CheckpointWithWritesOutputSerializer(many=True),
        operation_id="thread_checkpoints_list",
    )
    def get(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id, related=False)
        return paginate(
            queryset=checkpoint_list_for_thread(thread=thread, filters=request.query_params),
            serializer_class=CheckpointWithWritesOutputSerializer,
            request=request,
            view=self,
        )

    @extend_schema(
        summary="Store a checkpoint of a thread",
        request=InputSerializer,
        responses={201: CheckpointOutputSerializer, 200: CheckpointOutputSerializer},
        examples=[
            OpenApiExample(
                "Step 2 of a LangGraph run",
                value={
                    "checkpoint_ns": "",
                    "checkpoint_id": "1ef9a2c4-7d3b-6e10-8002-3c1f0b2a9d11",
                    "parent_checkpoint_id": "1ef9a2c4-7d3b-6e10-8001-9a8b7c6d5e4f",
                    "checkpoint": {"type": "msgpack", "data": "g6F2AqJ0c6Q="},
                    "metadata": {"source": "loop", "step": 2},
                },
                request_only=True,
            ),
            OpenApiExample("Stored", value=CHECKPOINT_EXAMPLE, response_only=True),
        ],
        description="Store a checkpoint; the same (checkpoint_ns, checkpoint_id) again replaces it (200).",
    )
    def put(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id, related=False)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        checkpoint, created = checkpoint_put(
            thread=thread,
            checkpoint_ns=data["checkpoint_ns"],
            checkpoint_id=data["checkpoint_id"],
            parent_checkpoint_id=data.get("parent_checkpoint_id"),
            type=data["checkpoint"]["type"],
            data=data["checkpoint"]["data"],
            metadata=data["metadata"],
        )
        return Response(
            CheckpointOutputSerializer(checkpoint).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema_serializer(component_name="ThreadCheckpointDeleteOutput")
    class DeleteOutputSerializer(serializers.Serializer):
        deleted = serializers.IntegerField()
        writes = serializers.IntegerField()

    @extend_schema(
        summary="Delete every checkpoint of a thread",
        responses={200: DeleteOutputSerializer},
        examples=[CHECKPOINTS_DELETED_RESPONSE],
    )
    def delete(self, request, thread_id):
        thread = thread_get(principal=request.user, thread_id=thread_id, related=False)
        require_write(request.user)
        return Response(checkpoint_thread_delete(thread=thread, actor=request.user.actor))


class ThreadCheckpointLatestApi(APIView):
    @extend_schema(
        summary="Get a thread's latest checkpoint",
        parameters=[NS_PARAMETER],
        responses=CheckpointWithWritesOutputSerializer,
        examples=[CHECKPOINT_RESPONSE],
    )
    def get(self, request, thread_id):
        # Scoping happens inside the checkpoint query: one round trip instead of two.
        checkpoint = checkpoint_latest(
            principal=request.user, thread_id=thread_id, checkpoint_ns=_namespace(request)
        )
        return Response(CheckpointWithWritesOutputSerializer(checkpoint).data)


class ThreadCheckpointDetailApi(APIView):
    @extend_schema(
        summary="Get one checkpoint of a thread",
        parameters=[NS_PARAMETER],
        responses=CheckpointWithWritesOutputSerializer,
        examples=[CHECKPOINT_RESPONSE],
    )
    def get(self, request, thread_id, checkpoint_id):
        checkpoint = checkpoint_get(
            principal=request.user,
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            checkpoint_ns=_namespace(request),
        )
        return Response(CheckpointWithWritesOutputSerializer(checkpoint).data)


class ThreadCheckpointWritesApi(APIView):
    @extend_schema_serializer(component_name="ThreadCheckpointWritesWrite")
    class WriteSerializer(StrictSerializer):
        idx = serializers.IntegerField(min_value=-(2**31), max_value=2**31 - 1)
        channel = serializers.CharField(max_length=255)
        value = TypedValueSerializer()

    @extend_schema_serializer(component_name="ThreadCheckpointWritesInput")
    class InputSerializer(StrictSerializer):
        checkpoint_ns = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
        task_id = serializers.CharField(max_length=255)
        task_path = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")
        writes = serializers.ListField(allow_empty=False, max_length=10_000)

    @extend_schema_serializer(component_name="ThreadCheckpointWritesOutput")
    class OutputSerializer(serializers.Serializer):
        stored = serializers.IntegerField(help_text="Writes that were new.")
        pending_writes = PendingWriteOutputSerializer(many=True)

    @extend_schema(
        summary="Store a task's pending writes on a checkpoint",
        request=InputSerializer,
        responses=OutputSerializer,
        examples=[
            OpenApiExample(
                "One write to the messages channel",
                value={
                    "task_id": "task-1",
                    "writes": [
                        {
                            "idx": 0,
                            "channel": "messages",
                            "value": {"type": "msgpack", "data": "kqVoZWxsbw=="},
                        }
                    ],
                },
                request_only=True,
            ),
            OpenApiExample(
                "Stored", value={"stored": 1, "pending_writes": [PENDING_WRITE_EXAMPLE]}, response_only=True
            ),
        ],
    )
    def put(self, request, thread_id, checkpoint_id):
        thread = thread_get(principal=request.user, thread_id=thread_id, related=False)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        writes = self.WriteSerializer(data=serializer.validated_data["writes"], many=True)
        if not writes.is_valid():
            raise serializers.ValidationError({"writes": writes.errors})
        data = serializer.validated_data
        checkpoint = checkpoint_get(
            thread=thread, checkpoint_id=checkpoint_id, checkpoint_ns=data["checkpoint_ns"], with_writes=False
        )
        stored = checkpoint_writes_put(
            checkpoint=checkpoint,
            task_id=data["task_id"],
            task_path=data["task_path"],
            writes=[
                {
                    "idx": w["idx"],
                    "channel": w["channel"],
                    "type": w["value"]["type"],
                    "data": w["value"]["data"],
                }
                for w in writes.validated_data
            ],
        )
        pending = checkpoint.writes.order_by("task_path", "task_id", "idx")
        return Response(
            {"stored": stored, "pending_writes": PendingWriteOutputSerializer(pending, many=True).data}
        )


@extend_schema_view(
    get=extend_schema(summary="List checkpoints across threads", examples=[CHECKPOINT_RESPONSE])
)
class CheckpointListApi(ListApi):
    selector = checkpoint_list
    OutputSerializer = CheckpointWithWritesOutputSerializer
    filterset_class = CheckpointFilter
    operation_id = "checkpoints_list"


@extend_schema_view(
    post=extend_schema(
        summary="Delete several checkpoints",
        examples=[
            OpenApiExample(
                "Two checkpoints",
                value={
                    "ids": ["e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9", "f6a7b8c9-d0e1-4f2a-b3c4-d5e6f7a8b9c0"]
                },
                request_only=True,
            ),
            CHECKPOINTS_DELETED_RESPONSE,
        ],
    )
)
class CheckpointBatchDeleteApi(BatchDeleteApi):
    service = checkpoint_batch_delete

    @extend_schema_serializer(component_name="CheckpointBatchDeleteOutput")
    class OutputSerializer(serializers.Serializer):
        deleted = serializers.IntegerField()
        writes = serializers.IntegerField()
