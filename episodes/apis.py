from contextlib import nullcontext

from django.db import transaction
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_write
from core.api_views import BatchDeleteApi, ListApi, RetrieveUpdateDestroyApi
from core.serializers import StrictSerializer
from core.services import agent_pending_store
from episodes.filters import EpisodeFilter
from episodes.models import Episode
from episodes.selectors import episode_get, episode_list, episode_search_hybrid
from episodes.services import (
    episode_batch_delete,
    episode_close,
    episode_create,
    episode_delete,
    episode_feedback,
    episode_update,
)
from threads.selectors import memory_context_for_write

ADA_ID = "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01"
THREAD_ID = "4f2a9c1e-7b3d-4e5f-a6b7-c8d9e0f1a2b3"
EPISODE_ID = "a3b4c5d6-e7f8-4a9b-8c0d-1e2f3a4b5c6d"
EPISODE_EXAMPLE = {
    "id": EPISODE_ID,
    "agent": "support-bot",
    "memory_user": ADA_ID,
    "thread": THREAD_ID,
    "trigger_type": "chat",
    "trigger_payload": {"chat_id": "chat-1001"},
    "input": {"goal": "Refund order 4411"},
    "messages": [{"role": "user", "content": "Please refund order 4411."}],
    "actions": [{"tool": "refund_order", "arguments": {"order": "4411"}, "result": "ok"}],
    "outcome": "success",
    "final_output": {"refunded": True},
    "error": "",
    "started_at": "2026-11-23T14:40:53.415549Z",
    "ended_at": "2026-11-23T14:40:57.015549Z",
    "duration_ms": 3600,
    "rating": None,
    "feedback_comment": "",
    "created_at": "2026-11-23T14:40:53.415647Z",
}
EPISODE_RESPONSE = OpenApiExample("An episode", value=EPISODE_EXAMPLE, response_only=True)


class EpisodeOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug", read_only=True, allow_null=True)
    memory_user = serializers.UUIDField(source="memory_user_id", allow_null=True)
    thread = serializers.UUIDField(source="thread_id", allow_null=True)
    trigger_type = serializers.CharField()
    trigger_payload = serializers.JSONField()
    input = serializers.JSONField()
    messages = serializers.JSONField()
    actions = serializers.JSONField()
    outcome = serializers.CharField()
    final_output = serializers.JSONField(allow_null=True)
    error = serializers.CharField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    rating = serializers.IntegerField(allow_null=True)
    feedback_comment = serializers.CharField()
    created_at = serializers.DateTimeField()


class EpisodeDeleteOutputSerializer(serializers.Serializer):
    episodes = serializers.IntegerField(help_text="Episodes deleted.")
    facts_unlinked = serializers.IntegerField(help_text="Facts that cited them as their source, kept.")


@extend_schema_view(get=extend_schema(summary="List episodes", examples=[EPISODE_RESPONSE]))
class EpisodeListApi(ListApi):
    selector = episode_list
    OutputSerializer = EpisodeOutputSerializer
    filterset_class = EpisodeFilter
    operation_id = "episodes_list"

    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(max_length=100, required=False, allow_blank=True)
        memory_user = serializers.UUIDField(required=False, allow_null=True)
        thread = serializers.UUIDField(required=False, allow_null=True)
        trigger_type = serializers.CharField(max_length=50, required=False, allow_blank=True)
        trigger_payload = serializers.DictField(required=False)
        input = serializers.JSONField(required=False)
        messages = serializers.ListField(required=False)
        actions = serializers.ListField(required=False, help_text="Tool calls with their results.")
        started_at = serializers.DateTimeField(required=False)
        outcome = serializers.ChoiceField(choices=Episode.Outcome.choices, required=False)
        final_output = serializers.JSONField(required=False, allow_null=True)
        error = serializers.CharField(required=False, allow_blank=True)
        ended_at = serializers.DateTimeField(required=False)

    @extend_schema(
        summary="Record an episode (open, or already closed with its outcome)",
        request=InputSerializer,
        responses={201: EpisodeOutputSerializer},
        examples=[
            OpenApiExample(
                "A finished refund run",
                value={
                    "agent": "support-bot",
                    "memory_user": ADA_ID,
                    "thread": THREAD_ID,
                    "trigger_type": "chat",
                    "trigger_payload": {"chat_id": "chat-1001"},
                    "input": {"goal": "Refund order 4411"},
                    "messages": [{"role": "user", "content": "Please refund order 4411."}],
                    "actions": [{"tool": "refund_order", "arguments": {"order": "4411"}, "result": "ok"}],
                    "started_at": "2026-11-23T14:40:53.415549Z",
                    "outcome": "success",
                    "final_output": {"refunded": True},
                    "ended_at": "2026-11-23T14:40:57.015549Z",
                },
                request_only=True,
            ),
            EPISODE_RESPONSE,
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        context = memory_context_for_write(
            principal=request.user,
            agent=data.pop("agent", None) or None,
            memory_user=data.pop("memory_user", None),
            thread=data.pop("thread", None),
        )
        # An agent named for the first time is stored with its first episode, in one
        # transaction (episode_create calls no model), so a refused episode registers none.
        pending = context.agent is not None and context.agent._state.adding
        with transaction.atomic() if pending else nullcontext():
            episode = episode_create(
                workspace=request.user.workspace,
                agent=agent_pending_store(context.agent),
                memory_user=context.memory_user,
                thread=context.thread,
                actor=request.user.actor,
                **data,
            )
        return Response(EpisodeOutputSerializer(episode).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(summary="Get an episode", examples=[EPISODE_RESPONSE]),
    patch=extend_schema(
        summary="Amend an episode's record",
        examples=[
            OpenApiExample(
                "One more action",
                value={"actions": [{"tool": "refund_order", "arguments": {"order": "4411"}, "result": "ok"}]},
                request_only=True,
            ),
            EPISODE_RESPONSE,
        ],
    ),
    delete=extend_schema(
        summary="Delete an episode",
        examples=[OpenApiExample("Deleted", value={"episodes": 1, "facts_unlinked": 1}, response_only=True)],
    ),
)
class EpisodeDetailApi(RetrieveUpdateDestroyApi):
    selector = episode_get
    update_service = episode_update
    delete_service = episode_delete
    OutputSerializer = EpisodeOutputSerializer
    DeleteOutputSerializer = EpisodeDeleteOutputSerializer

    class InputSerializer(StrictSerializer):
        trigger_type = serializers.CharField(max_length=50, required=False, allow_blank=True)
        trigger_payload = serializers.DictField(required=False)
        input = serializers.JSONField(required=False)
        messages = serializers.ListField(required=False)
        actions = serializers.ListField(required=False)
        final_output = serializers.JSONField(required=False, allow_null=True)
        error = serializers.CharField(required=False, allow_blank=True)


class EpisodeCloseApi(APIView):
    """Record how the run ended; closing twice is a 409."""

    class InputSerializer(StrictSerializer):
        outcome = serializers.ChoiceField(choices=Episode.Outcome.choices)
        final_output = serializers.JSONField(required=False, allow_null=True)
        error = serializers.CharField(required=False, allow_blank=True)
        actions = serializers.ListField(required=False, help_text="Appended to the recorded actions.")
        ended_at = serializers.DateTimeField(required=False)

    @extend_schema(
        summary="Close an episode with its outcome",
        request=InputSerializer,
        responses=EpisodeOutputSerializer,
        examples=[
            OpenApiExample(
                "It worked",
                value={"outcome": "success", "final_output": {"refunded": True}},
                request_only=True,
            ),
            EPISODE_RESPONSE,
        ],
    )
    def post(self, request, episode_id):
        episode = episode_get(principal=request.user, episode_id=episode_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        episode = episode_close(episode=episode, actor=request.user.actor, **serializer.validated_data)
        return Response(EpisodeOutputSerializer(episode).data)


class EpisodeFeedbackApi(APIView):
    class InputSerializer(StrictSerializer):
        rating = serializers.IntegerField(min_value=1, max_value=5, allow_null=True)
        comment = serializers.CharField(required=False, allow_blank=True, max_length=10_000)

    @extend_schema(
        summary="Rate an episode",
        request=InputSerializer,
        responses=EpisodeOutputSerializer,
        examples=[
            OpenApiExample(
                "Four stars", value={"rating": 4, "comment": "Quick and polite."}, request_only=True
            ),
            OpenApiExample(
                "Rated",
                value={**EPISODE_EXAMPLE, "rating": 4, "feedback_comment": "Quick and polite."},
                response_only=True,
            ),
        ],
    )
    def post(self, request, episode_id):
        require_write(request.user)
        episode = episode_get(principal=request.user, episode_id=episode_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        episode = episode_feedback(
            episode=episode, rating=data["rating"], comment=data.get("comment", ""), actor=request.user.actor
        )
        return Response(EpisodeOutputSerializer(episode).data)


@extend_schema_view(
    post=extend_schema(
        summary="Delete several episodes",
        examples=[
            OpenApiExample("One episode", value={"ids": [EPISODE_ID]}, request_only=True),
            OpenApiExample("Deleted", value={"episodes": 1, "facts_unlinked": 0}, response_only=True),
        ],
    )
)
class EpisodeBatchDeleteApi(BatchDeleteApi):
    service = episode_batch_delete
    OutputSerializer = EpisodeDeleteOutputSerializer


class EpisodeHitSerializer(serializers.Serializer):
    score = serializers.FloatField(help_text="The fused score the hits are ordered by.")
    lexical = serializers.FloatField(help_text="BM25 of the query's terms in the episode's text (0: none).")
    vector = serializers.FloatField(
        allow_null=True,
        help_text="Cosine similarity of the episode's vector (null: none yet, or lexical mode).",
    )
    recency = serializers.FloatField(help_text="The recency term added to the score.")
    episode = EpisodeOutputSerializer()


class EpisodeSearchApi(APIView):
    """Episodes most related to a query: full-text, by meaning, or both (hybrid)."""

    read_only_safe = True

    class InputSerializer(StrictSerializer):
        query = serializers.CharField(allow_blank=True, trim_whitespace=False)
        mode = serializers.ChoiceField(
            choices=["hybrid", "lexical", "vector", "semantic"],
            default="hybrid",
            help_text="hybrid (default), lexical (full-text only), vector or semantic (by meaning only).",
        )
        top_k = serializers.IntegerField(required=False, default=10, min_value=1, max_value=100)
        agent = serializers.SlugField(max_length=100, required=False, allow_blank=True)
        memory_user = serializers.UUIDField(required=False, allow_null=True)
        outcome = serializers.ChoiceField(
            choices=[*Episode.Outcome.choices, ("open", "Open (not closed)")],
            required=False,
            allow_blank=True,
        )
        trigger_type = serializers.CharField(max_length=50, required=False, allow_blank=True)
        started_after = serializers.DateTimeField(required=False, allow_null=True)
        started_before = serializers.DateTimeField(required=False, allow_null=True)

    class OutputSerializer(serializers.Serializer):
        results = serializers.ListField(child=EpisodeHitSerializer())
        plan = serializers.CharField(allow_null=True, help_text="Vector plan used: exact, hnsw, or null.")

    FILTERS = ("agent", "memory_user", "outcome", "trigger_type", "started_after", "started_before")

    @extend_schema(
        summary="Search episodes by meaning and text",
        request=InputSerializer,
        responses=OutputSerializer,
        examples=[
            OpenApiExample(
                "Refunds that went wrong",
                value={"query": "customer wanted money back", "agent": "support-bot", "outcome": "failure"},
                request_only=True,
            ),
            OpenApiExample(
                "One hit",
                value={
                    "results": [
                        {
                            "score": 1.12,
                            "lexical": 0.0,
                            "vector": 0.61,
                            "recency": 0.1,
                            "episode": EPISODE_EXAMPLE,
                        }
                    ],
                    "plan": "exact",
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        filters = {}
        for name in self.FILTERS:
            value = data.get(name)
            if value not in (None, ""):
                filters[name] = value.isoformat() if hasattr(value, "isoformat") else str(value)
        result = episode_search_hybrid(
            principal=request.user,
            query=data["query"],
            filters=filters,
            top_k=data["top_k"],
            mode="vector" if data["mode"] == "semantic" else data["mode"],
        )
        body = {
            "results": [
                {
                    "score": round(hit.score, 6),
                    "lexical": round(hit.lexical, 6),
                    "vector": None if hit.vector is None else round(hit.vector, 6),
                    "recency": round(hit.recency, 6),
                    "episode": EpisodeOutputSerializer(hit.episode).data,
                }
                for hit in result.hits
            ],
            "plan": result.plan,
        }
        return Response(body)
