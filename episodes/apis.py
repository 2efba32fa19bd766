from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_write
from core.api_views import BatchDeleteApi, ListApi, RetrieveUpdateDestroyApi
from core.serializers import StrictSerializer
from episodes.filters import EpisodeFilter
from episodes.models import Episode
from episodes.selectors import episode_get, episode_list
from episodes.services import (
    episode_batch_delete,
    episode_close,
    episode_create,
    episode_delete,
    episode_feedback,
    episode_update,
)
from threads.selectors import memory_context_resolve


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

    @extend_schema(request=InputSerializer, responses={201: EpisodeOutputSerializer})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        context = memory_context_resolve(
            principal=request.user,
            agent=data.pop("agent", None) or None,
            memory_user=data.pop("memory_user", None),
            thread=data.pop("thread", None),
            create_agent=True,
        )
        episode = episode_create(
            workspace=request.user.workspace,
            agent=context.agent,
            memory_user=context.memory_user,
            thread=context.thread,
            actor=request.user.actor,
            **data,
        )
        return Response(EpisodeOutputSerializer(episode).data, status=status.HTTP_201_CREATED)


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

    @extend_schema(request=InputSerializer, responses=EpisodeOutputSerializer)
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

    @extend_schema(request=InputSerializer, responses=EpisodeOutputSerializer)
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


class EpisodeBatchDeleteApi(BatchDeleteApi):
    service = episode_batch_delete
    OutputSerializer = EpisodeDeleteOutputSerializer
