"""The review queue API: list held items across tiers, approve, reject, merge, edit then approve."""

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from core.errors import NotFoundError
from core.models import Agent
from core.serializers import StrictSerializer
from review.selectors import (
    REVIEW_ITEM_NOT_FOUND,
    STATES,
    TIERS,
    review_count,
    review_counts,
    review_item_get,
    review_list,
)
from review.services import (
    ACTION_APPROVE,
    ACTION_MERGE,
    ACTION_REJECT,
    ITEM_NOT_HELD,
    review_approve,
    review_batch,
)

# A queue page is read whole by a person: 200 items is more than a screen's worth of decisions.
REVIEW_PAGE_MAX = 200
# Items per batch call: each is its own transaction (~5 ms), so 500 answer within a few seconds.
REVIEW_BATCH_MAX = 500
ITEM_ID = "0b6f1d2c-8a4e-4f55-9c1a-2e7d3b9a6c41"

ITEM_EXAMPLE = {
    "tier": "entry",
    "id": ITEM_ID,
    "state": "held",
    "text": "Ada's card payments failed because billing read the old card.",
    "evidence": "billing still has the old card on file",
    "source": "verified_assistant_finding",
    "agent": "support-bot",
    "memory_user": "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01",
    "created_at": "2026-11-23T14:40:52.957998Z",
    "review_note": "",
    "reviewed_at": None,
    "reviewed_by": "",
    "similar": None,
    "fields": {},
}
ITEM_RESPONSE = OpenApiExample("A held entry", value=ITEM_EXAMPLE, response_only=True)
ITEMS_REQUEST = OpenApiExample(
    "Two items", value={"items": [{"tier": "entry", "id": ITEM_ID}]}, request_only=True
)


class SimilarSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    text = serializers.CharField()


class ReviewItemSerializer(serializers.Serializer):
    tier = serializers.ChoiceField(choices=TIERS)
    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=STATES)
    text = serializers.CharField(help_text="The entry's content, `key: value` of a fact, a procedure's name.")
    evidence = serializers.CharField(help_text="The quote behind it (a procedure: its description).")
    source = serializers.CharField()
    agent = serializers.SerializerMethodField(help_text="Slug of the agent that proposed it.")
    memory_user = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    review_note = serializers.CharField(help_text="The reason given on rejection.")
    reviewed_at = serializers.DateTimeField(allow_null=True)
    reviewed_by = serializers.CharField()
    similar = SimilarSerializer(
        allow_null=True, help_text="The stored item it may duplicate: the merge the queue suggests."
    )
    fields = serializers.DictField(
        source="extra", help_text="Tier fields: a fact's key, value, scope, fact_type; a procedure's name."
    )

    def get_agent(self, item) -> str | None:
        return item.agent.slug if item.agent is not None else None

    def get_memory_user(self, item) -> str | None:
        return str(item.memory_user.pk) if item.memory_user is not None else None


class CountsSerializer(serializers.Serializer):
    entry = serializers.IntegerField()
    fact = serializers.IntegerField()
    procedure = serializers.IntegerField()
    total = serializers.IntegerField()


@extend_schema_serializer(component_name="PaginatedReviewItemList")
class ReviewListOutputSerializer(serializers.Serializer):
    """A page of the queue (the envelope of every paged list), with the held counts per tier."""

    count = serializers.IntegerField(help_text="Items of this state (and tier) under the filters.")
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ReviewItemSerializer(many=True)
    counts = CountsSerializer(
        required=False, help_text="Held items per tier, under the same agent and person filters."
    )


class ReviewListApi(APIView):
    """The review queue: items held for review (or, with `state`, decided ones), newest first."""

    read_replica = True

    class FilterSerializer(StrictSerializer):
        tier = serializers.ChoiceField(choices=TIERS, required=False)
        state = serializers.ChoiceField(choices=STATES, required=False, default="held")
        agent = serializers.SlugField(max_length=100, required=False)
        memory_user = serializers.UUIDField(required=False)
        limit = serializers.IntegerField(min_value=1, max_value=REVIEW_PAGE_MAX, required=False, default=50)
        offset = serializers.IntegerField(min_value=0, max_value=100_000, required=False, default=0)

    @extend_schema(
        summary="List the review queue",
        operation_id="review_list",
        parameters=[FilterSerializer],
        responses=ReviewListOutputSerializer,
        examples=[
            OpenApiExample(
                "One held entry",
                value={
                    "count": 1,
                    "limit": 50,
                    "offset": 0,
                    "next": None,
                    "previous": None,
                    "results": [ITEM_EXAMPLE],
                    "counts": {"entry": 1, "fact": 0, "procedure": 0, "total": 1},
                },
                response_only=True,
            )
        ],
    )
    def get(self, request):
        serializer = self.FilterSerializer(data=request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        principal = request.user
        agent = memory_user = None
        empty = False
        if data.get("agent"):
            agent = Agent.objects.filter(workspace=principal.workspace, slug=data["agent"]).first()
            empty = agent is None
        if data.get("memory_user"):
            from identities.models import MemoryUser

            memory_user = MemoryUser.objects.filter(
                workspace=principal.workspace, pk=data["memory_user"]
            ).first()
            empty = empty or memory_user is None
        if empty:
            items, counts, count = [], {"entry": 0, "fact": 0, "procedure": 0, "total": 0}, 0
        else:
            items = review_list(
                principal=principal,
                tier=data.get("tier"),
                state=data["state"],
                agent=agent,
                memory_user=memory_user,
                limit=data["limit"],
                offset=data["offset"],
            )
            counts = review_counts(principal=principal, agent=agent, memory_user=memory_user)
            count = review_count(
                principal=principal,
                tier=data.get("tier"),
                state=data["state"],
                agent=agent,
                memory_user=memory_user,
            )
        limit, offset = data["limit"], data["offset"]
        url = request.build_absolute_uri()
        body = {
            "count": count,
            "limit": limit,
            "offset": offset,
            "next": replace_query_param(url, "offset", offset + limit) if offset + limit < count else None,
            "previous": (None if offset == 0 else replace_query_param(url, "offset", max(0, offset - limit))),
            "results": items,
            "counts": counts,
        }
        return Response(ReviewListOutputSerializer(body).data)


class ItemRefSerializer(StrictSerializer):
    tier = serializers.ChoiceField(choices=TIERS)
    id = serializers.UUIDField()


class MergeRefSerializer(ItemRefSerializer):
    into = serializers.UUIDField(help_text="A stored, approved item of the same tier.")


class BatchResultSerializer(serializers.Serializer):
    tier = serializers.CharField()
    id = serializers.UUIDField()
    outcome = serializers.ChoiceField(
        choices=["approved", "rejected", "merged", "not_found", "not_held", "invalid"]
    )
    message = serializers.CharField(help_text="Why an item was not decided; empty otherwise.")
    item = ReviewItemSerializer(allow_null=True, help_text="The item as decided (a merge: the item kept).")


class BatchOutputSerializer(serializers.Serializer):
    results = BatchResultSerializer(many=True)


def _batch_response(request, *, action, items, reason=""):
    outcomes = review_batch(principal=request.user, action=action, items=items, reason=reason)
    return Response(BatchOutputSerializer({"results": outcomes}).data)


BATCH_EXAMPLE = OpenApiExample(
    "One approved, one already decided",
    value={
        "results": [
            {"tier": "entry", "id": ITEM_ID, "outcome": "approved", "message": "", "item": None},
            {
                "tier": "fact",
                "id": "5d0c2a8e-63b4-4e8f-a1f7-0c9e2b3d4a51",
                "outcome": "not_held",
                "message": ITEM_NOT_HELD,
                "item": None,
            },
        ]
    },
    response_only=True,
)


class ReviewApproveApi(APIView):
    """Approve held items: from now on they are recalled, searched and injected."""

    class InputSerializer(StrictSerializer):
        items = ItemRefSerializer(many=True, allow_empty=False, max_length=REVIEW_BATCH_MAX)

    @extend_schema(
        summary="Approve review items",
        operation_id="review_approve",
        request=InputSerializer,
        responses=BatchOutputSerializer,
        examples=[ITEMS_REQUEST, BATCH_EXAMPLE],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return _batch_response(request, action=ACTION_APPROVE, items=serializer.validated_data["items"])


class ReviewRejectApi(APIView):
    """Reject held items with a reason: kept for the audit, never recalled, not proposed again."""

    class InputSerializer(StrictSerializer):
        items = ItemRefSerializer(many=True, allow_empty=False, max_length=REVIEW_BATCH_MAX)
        reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")

    @extend_schema(
        summary="Reject review items",
        operation_id="review_reject",
        request=InputSerializer,
        responses=BatchOutputSerializer,
        examples=[
            OpenApiExample(
                "Not about this person",
                value={"items": [{"tier": "entry", "id": ITEM_ID}], "reason": "About her brother."},
                request_only=True,
            ),
            BATCH_EXAMPLE,
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        return _batch_response(request, action=ACTION_REJECT, items=data["items"], reason=data["reason"])


class ReviewMergeApi(APIView):
    """Merge held entries or facts into stored ones of the same tier: the stored item is confirmed
    and keeps the held one's evidence; the held one is kept, merged, never recalled."""

    class InputSerializer(StrictSerializer):
        items = MergeRefSerializer(many=True, allow_empty=False, max_length=REVIEW_BATCH_MAX)

    @extend_schema(
        summary="Merge review items",
        operation_id="review_merge",
        request=InputSerializer,
        responses=BatchOutputSerializer,
        examples=[
            OpenApiExample(
                "Into the stored entry",
                value={
                    "items": [
                        {"tier": "entry", "id": ITEM_ID, "into": "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"}
                    ]
                },
                request_only=True,
            ),
            BATCH_EXAMPLE,
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return _batch_response(request, action=ACTION_MERGE, items=serializer.validated_data["items"])


class ReviewItemApi(APIView):
    """One review item in any state; PATCH edits a held one and approves it in one step."""

    class InputSerializer(StrictSerializer):
        content = serializers.CharField(required=False, max_length=100_000, help_text="An entry's content.")
        value = serializers.JSONField(required=False, help_text="A fact's value.")
        fact_type = serializers.CharField(required=False, max_length=20)
        confidence = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
        name = serializers.CharField(required=False, max_length=200, help_text="A procedure's name.")
        description = serializers.CharField(required=False, allow_blank=True, max_length=100_000)

    def _tier(self, tier: str) -> str:
        if tier not in TIERS:
            raise NotFoundError(REVIEW_ITEM_NOT_FOUND)
        return tier

    @extend_schema(
        summary="Read a review item",
        responses=ReviewItemSerializer,
        operation_id="review_item_retrieve",
        examples=[ITEM_RESPONSE],
    )
    def get(self, request, tier, item_id):
        item = review_item_get(principal=request.user, tier=self._tier(tier), item_id=item_id)
        return Response(ReviewItemSerializer(item).data)

    @extend_schema(
        summary="Edit a held item, then approve it",
        operation_id="review_item_approve",
        request=InputSerializer,
        responses=ReviewItemSerializer,
        examples=[
            OpenApiExample(
                "A sharper wording",
                value={"content": "Billing charged Ada's old card; the new one was only on her profile."},
                request_only=True,
            ),
            OpenApiExample(
                "Approved",
                value={
                    **ITEM_EXAMPLE,
                    "state": "approved",
                    "text": "Billing charged Ada's old card; the new one was only on her profile.",
                    "reviewed_at": "2026-11-23T15:02:11.512230Z",
                    "reviewed_by": "operator:ana",
                },
                response_only=True,
            ),
        ],
    )
    def patch(self, request, tier, item_id):
        tier = self._tier(tier)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        item = review_approve(
            principal=request.user, tier=tier, item_id=item_id, edits=serializer.validated_data
        )
        return Response(ReviewItemSerializer(item).data)
