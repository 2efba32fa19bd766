from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_workspace_key
from core.api_views import ListApi, RetrieveApi
from core.errors import NotFoundError
from core.serializers import BatchDeleteInputSerializer, StrictSerializer
from identities.filters import MemoryUserFilter
from identities.selectors import (
    memory_user_get,
    memory_user_legal_holds,
    memory_user_list,
    memory_user_scope,
)
from identities.services import (
    LEGAL_HOLD_NOT_FOUND,
    memory_user_batch_delete,
    memory_user_create,
    memory_user_erase,
    memory_user_hold_place,
    memory_user_hold_release,
    memory_user_merge,
    memory_user_update,
)

COUNTS = serializers.DictField(child=serializers.IntegerField())

ADA_ID = "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01"
BO_ID = "0d4b7e2c-9a15-4f3b-8c6d-2e7f1a9b3c02"
MEMORY_USER_EXAMPLE = {
    "id": ADA_ID,
    "canonical_id": "telegram:1001",
    "display_name": "Ada",
    "preferences": {"language": "pt"},
    "merged_into": None,
    "identities": [{"channel": "telegram", "external_id": "1001", "profile": {"username": "ada"}}],
    "thread_count": 2,
    "message_count": 14,
    "first_seen_at": "2026-11-20T09:12:03.118204Z",
    "last_seen_at": "2026-11-23T14:40:52.957998Z",
    "created_at": "2026-11-20T09:12:03.118190Z",
    "legal_hold": None,
}
MEMORY_USER_RESPONSE = OpenApiExample("A person", value=MEMORY_USER_EXAMPLE, response_only=True)
ERASED_RESPONSE = OpenApiExample(
    "What was deleted",
    value={
        "memory_users": 1,
        "identities": 1,
        "threads": 2,
        "messages": 14,
        "facts": 3,
        "episodes": 1,
        "episodic_entries": 4,
    },
    response_only=True,
)


class ChannelIdentityOutputSerializer(serializers.Serializer):
    channel = serializers.CharField()
    external_id = serializers.CharField()
    profile = serializers.JSONField()


class LegalHoldOutputSerializer(serializers.Serializer):
    at = serializers.DateTimeField(source="legal_hold_at")
    reason = serializers.CharField(source="legal_hold_reason")
    by = serializers.CharField(source="legal_hold_by")


class HeldRecordOutputSerializer(serializers.Serializer):
    """A legal hold that covers a person, named by the record it was placed on."""

    placed_on = serializers.UUIDField(
        source="pk", help_text="The record the hold was placed on: this person, or one merged into them."
    )
    merged = serializers.SerializerMethodField(
        help_text="True when that record has been merged into this person since."
    )
    at = serializers.DateTimeField(source="legal_hold_at")
    reason = serializers.CharField(source="legal_hold_reason")
    by = serializers.CharField(source="legal_hold_by")

    def get_merged(self, holder) -> bool:
        return holder.merged_into_id is not None


class MemoryUserLegalHoldsOutputSerializer(serializers.Serializer):
    """The legal holds that cover a person: their own and those of records merged into them."""

    memory_user = serializers.UUIDField()
    legal_holds = HeldRecordOutputSerializer(many=True)


class MemoryUserOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    canonical_id = serializers.CharField()
    display_name = serializers.CharField()
    preferences = serializers.JSONField(help_text="Cached from the user-scope user_preference facts.")
    merged_into = serializers.UUIDField(source="merged_into_id", allow_null=True)
    identities = ChannelIdentityOutputSerializer(many=True, source="identities.all")
    thread_count = serializers.IntegerField(default=0)
    message_count = serializers.IntegerField(default=0)
    first_seen_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    legal_hold = serializers.SerializerMethodField(
        help_text="The person's legal hold (retention skips their rows, erasure is refused), or null."
    )

    @extend_schema_field(LegalHoldOutputSerializer(allow_null=True))
    def get_legal_hold(self, memory_user):
        if memory_user.legal_hold_at is None:
            return None
        return LegalHoldOutputSerializer(memory_user).data


class MemoryUserEraseOutputSerializer(serializers.Serializer):
    """What an erasure deleted: the people (with those merged into them) and all their rows."""

    memory_users = serializers.IntegerField()
    identities = serializers.IntegerField()
    threads = serializers.IntegerField()
    messages = serializers.IntegerField()
    facts = serializers.IntegerField()
    episodes = serializers.IntegerField()
    episodic_entries = serializers.IntegerField()


class IdentityInputSerializer(StrictSerializer):
    channel = serializers.CharField(max_length=50)
    external_id = serializers.CharField(max_length=255)
    profile = serializers.DictField(required=False)


@extend_schema_view(get=extend_schema(summary="List memory users (people)", examples=[MEMORY_USER_RESPONSE]))
class MemoryUserListApi(ListApi):
    selector = memory_user_list
    OutputSerializer = MemoryUserOutputSerializer
    filterset_class = MemoryUserFilter
    operation_id = "memory_users_list"

    class InputSerializer(StrictSerializer):
        canonical_id = serializers.CharField(max_length=255)
        display_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        identities = IdentityInputSerializer(many=True, required=False)

    @extend_schema(
        summary="Create a memory user with their channel identities",
        request=InputSerializer,
        responses={201: MemoryUserOutputSerializer},
        examples=[
            OpenApiExample(
                "Ada, known on Telegram",
                value={
                    "canonical_id": "telegram:1001",
                    "display_name": "Ada",
                    "identities": [
                        {"channel": "telegram", "external_id": "1001", "profile": {"username": "ada"}}
                    ],
                },
                request_only=True,
            ),
            MEMORY_USER_RESPONSE,
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        memory_user = memory_user_create(
            workspace=request.user.workspace, actor=request.user.actor, **serializer.validated_data
        )
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user.pk)
        return Response(MemoryUserOutputSerializer(memory_user).data, status=status.HTTP_201_CREATED)


# Changing or erasing a person is a workspace-level act, checked before anything else: PATCH and
# DELETE stay written out. The batch delete below checks the same way.
@extend_schema_view(get=extend_schema(summary="Get a memory user", examples=[MEMORY_USER_RESPONSE]))
class MemoryUserDetailApi(RetrieveApi):
    selector = memory_user_get
    OutputSerializer = MemoryUserOutputSerializer

    class InputSerializer(StrictSerializer):
        display_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        canonical_id = serializers.CharField(max_length=255, required=False)

    @extend_schema(
        summary="Rename a memory user or change their canonical id",
        request=InputSerializer,
        responses=MemoryUserOutputSerializer,
        examples=[
            OpenApiExample("A new display name", value={"display_name": "Ada"}, request_only=True),
            MEMORY_USER_RESPONSE,
        ],
    )
    def patch(self, request, memory_user_id):
        require_workspace_key(request.user)
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        memory_user_update(memory_user=memory_user, actor=request.user.actor, **serializer.validated_data)
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        return Response(MemoryUserOutputSerializer(memory_user).data)

    @extend_schema(
        summary="Erase a memory user and everything stored about them",
        responses={200: MemoryUserEraseOutputSerializer},
        description="Right to erasure: deletes everything of this person. A record merged into "
        "another holds nothing any more: it answers 409 `merged` with the survivor's id in "
        "`error.fields.merged_into`, and erasing the survivor erases it too.",
        examples=[ERASED_RESPONSE],
    )
    def delete(self, request, memory_user_id):
        require_workspace_key(request.user)
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        counts = memory_user_erase(memory_user=memory_user, actor=request.user.actor)
        return Response(MemoryUserEraseOutputSerializer(counts).data)


class MemoryUserMergeApi(APIView):
    """Merge this user (the source) into `target`. Idempotent."""

    class InputSerializer(StrictSerializer):
        target = serializers.UUIDField()

    class OutputSerializer(serializers.Serializer):
        target = MemoryUserOutputSerializer()
        counts = COUNTS
        already_merged = serializers.BooleanField()

    @extend_schema(
        summary="Merge a memory user into another",
        request=InputSerializer,
        responses=OutputSerializer,
        examples=[
            OpenApiExample("Into Ada's record", value={"target": ADA_ID}, request_only=True),
            OpenApiExample(
                "Merged",
                value={
                    "target": {**MEMORY_USER_EXAMPLE, "thread_count": 3, "message_count": 20},
                    "counts": {
                        "threads": 1,
                        "facts": 2,
                        "fact_conflicts": 0,
                        "episodes": 1,
                        "episodic_entries": 1,
                        "identities": 1,
                        "merged_users": 0,
                    },
                    "already_merged": False,
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request, memory_user_id):
        require_workspace_key(request.user)
        source = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        target = memory_user_get(principal=request.user, memory_user_id=serializer.validated_data["target"])
        result = memory_user_merge(source=source, target=target, actor=request.user.actor)
        target = memory_user_get(principal=request.user, memory_user_id=result.target.pk)
        return Response(
            {
                "target": MemoryUserOutputSerializer(target).data,
                "counts": result.counts,
                "already_merged": result.already_merged,
            }
        )


class MemoryUserLegalHoldApi(APIView):
    """List, place or release the legal holds that cover a person (changes: workspace keys only)."""

    class InputSerializer(StrictSerializer):
        reason = serializers.CharField(max_length=500)

    class ReleaseInputSerializer(StrictSerializer):
        placed_on = serializers.UUIDField(
            required=False,
            help_text="The record the hold was placed on: this person (the default) or one merged "
            "into them (`placed_on` of GET).",
        )

    @extend_schema(
        summary="List the legal holds that cover a memory user",
        description="The person's own hold and those of records merged into them: a merge moves "
        "the rows, and such a hold keeps covering them (retention skips them, erasure answers 409 "
        "`legal_hold`) until it is released here with `placed_on`.",
        responses=MemoryUserLegalHoldsOutputSerializer,
        examples=[
            OpenApiExample(
                "Held since a merge",
                value={
                    "memory_user": ADA_ID,
                    "legal_holds": [
                        {
                            "placed_on": BO_ID,
                            "merged": True,
                            "at": "2026-11-23T15:02:11.512230Z",
                            "reason": "Case 2026-114: preserve",
                            "by": "api_key:mk_live_3f9a",
                        }
                    ],
                },
                response_only=True,
            )
        ],
    )
    def get(self, request, memory_user_id):
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        holds = memory_user_legal_holds(memory_user=memory_user)
        return Response(
            MemoryUserLegalHoldsOutputSerializer({"memory_user": memory_user.pk, "legal_holds": holds}).data
        )

    @extend_schema(
        summary="Place a legal hold on a memory user",
        description="Retention skips everything of this person and erasure answers 409 "
        "`legal_hold` until the hold is released. Placing it again replaces the reason.",
        request=InputSerializer,
        responses=MemoryUserOutputSerializer,
        examples=[
            OpenApiExample("A court order", value={"reason": "Case 2026-114: preserve"}, request_only=True),
            OpenApiExample(
                "Held",
                value={
                    **MEMORY_USER_EXAMPLE,
                    "legal_hold": {
                        "at": "2026-11-23T15:02:11.512230Z",
                        "reason": "Case 2026-114: preserve",
                        "by": "api_key:mk_live_3f9a",
                    },
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request, memory_user_id):
        require_workspace_key(request.user)
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        memory_user_hold_place(
            memory_user=memory_user, reason=serializer.validated_data["reason"], actor=request.user.actor
        )
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        return Response(MemoryUserOutputSerializer(memory_user).data)

    @extend_schema(
        summary="Release a memory user's legal hold",
        description="Releases the person's own hold, or with `placed_on` the hold of a record "
        "merged into them (GET lists both). A `placed_on` that is neither is a 404.",
        parameters=[ReleaseInputSerializer],
        request=None,
        responses={200: MemoryUserOutputSerializer},
        examples=[MEMORY_USER_RESPONSE],
    )
    def delete(self, request, memory_user_id):
        require_workspace_key(request.user)
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        serializer = self.ReleaseInputSerializer(data=request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        placed_on = None
        if "placed_on" in serializer.validated_data:
            # Resolved like a read: a record of another workspace is the same 404 as none.
            placed_on_id = serializer.validated_data["placed_on"]
            placed_on = memory_user_scope(request.user).filter(pk=placed_on_id).first()
            if placed_on is None:
                raise NotFoundError(LEGAL_HOLD_NOT_FOUND, fields={"placed_on": [LEGAL_HOLD_NOT_FOUND]})
        memory_user_hold_release(memory_user=memory_user, placed_on=placed_on, actor=request.user.actor)
        memory_user = memory_user_get(principal=request.user, memory_user_id=memory_user_id)
        return Response(MemoryUserOutputSerializer(memory_user).data)


class MemoryUserBatchDeleteApi(APIView):
    @extend_schema(
        summary="Erase several memory users",
        request=BatchDeleteInputSerializer,
        responses={200: MemoryUserEraseOutputSerializer},
        examples=[
            OpenApiExample("Two people", value={"ids": [ADA_ID, BO_ID]}, request_only=True),
            ERASED_RESPONSE,
        ],
    )
    def post(self, request):
        require_workspace_key(request.user)
        serializer = BatchDeleteInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        counts = memory_user_batch_delete(principal=request.user, ids=serializer.validated_data["ids"])
        return Response(MemoryUserEraseOutputSerializer(counts).data)
