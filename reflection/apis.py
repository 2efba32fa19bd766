from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response

from core.access import agent_resolve, require_write
from core.api_views import ListApi, RetrieveApi
from core.serializers import StrictSerializer
from reflection.filters import ReflectionProfileFilter, ReflectionRunFilter
from reflection.models import ReflectionRun
from reflection.selectors import reflection_profile_list, reflection_run_get, reflection_run_list
from reflection.services import reflection_start

RUN_EXAMPLE = {
    "id": "5d0c2f8e-3b1a-4c6d-9e7f-8a9b0c1d2e3f",
    "agent": "support-bot",
    "state": "running",
    "trigger": "api",
    "method": "llm",
    "started_at": "2026-11-23T14:41:02.179850Z",
    "finished_at": None,
    "progress_done": 12,
    "progress_total": 40,
    "percent": 30,
    "merged": 3,
    "retired": 1,
    "profiles_refreshed": 12,
    "tokens_used": 4180,
    "error": "",
    "resume_after": None,
    "created_at": "2026-11-23T14:41:01.902113Z",
}


class RunOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug")
    state = serializers.CharField(help_text="queued, running, waiting (for the LLM budget), done or failed.")
    trigger = serializers.CharField(help_text="schedule, api or operator.")
    method = serializers.CharField(help_text="llm when the chat model decided anything, else offline.")
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    progress_done = serializers.IntegerField(help_text="People reflected on so far.")
    progress_total = serializers.IntegerField(help_text="People the run covers.")
    percent = serializers.IntegerField()
    merged = serializers.IntegerField(help_text="Duplicate entries and facts folded into an older one.")
    retired = serializers.IntegerField(help_text="Entries and facts closed as contradicted by newer ones.")
    profiles_refreshed = serializers.IntegerField()
    tokens_used = serializers.IntegerField(help_text="LLM tokens the run spent (the provider's usage).")
    error = serializers.CharField()
    resume_after = serializers.DateTimeField(allow_null=True, help_text="A waiting run resumes then.")
    created_at = serializers.DateTimeField()


class ProfileOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug")
    memory_user = serializers.UUIDField(source="memory_user_id")
    text = serializers.CharField(help_text="The compact profile, one '- topic: value' line each.")
    method = serializers.CharField()
    facts_used = serializers.IntegerField()
    entries_used = serializers.IntegerField()
    refreshed_at = serializers.DateTimeField()


@extend_schema_view(
    get=extend_schema(
        summary="List reflection runs",
        examples=[OpenApiExample("A run", value=RUN_EXAMPLE, response_only=True)],
    )
)
class ReflectionRunListApi(ListApi):
    """Reflection runs, newest first; an agent-bound key sees its agent's only."""

    selector = reflection_run_list
    filterset_class = ReflectionRunFilter
    OutputSerializer = RunOutputSerializer
    operation_id = "reflection_runs_list"

    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(
            max_length=100, required=False, allow_blank=True, help_text="Omitted with an agent-bound key."
        )

    @extend_schema(
        summary="Start a reflection run for an agent",
        description="Queues a run for the agent's workspace's turn. An agent has one run at a time: "
        "while one is queued, running or waiting, this answers 200 with it instead of 201.",
        request=InputSerializer,
        responses={201: RunOutputSerializer, 200: RunOutputSerializer},
        examples=[
            OpenApiExample("For an agent", value={"agent": "support-bot"}, request_only=True),
            OpenApiExample(
                "Queued",
                value={
                    **RUN_EXAMPLE,
                    "state": "queued",
                    "started_at": None,
                    "progress_done": 0,
                    "percent": 0,
                },
                response_only=True,
                status_codes=["201"],
            ),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        require_write(request.user)
        agent = agent_resolve(request.user, serializer.validated_data.get("agent"), create=False)
        run, created = reflection_start(
            agent=agent, trigger=ReflectionRun.Trigger.API, actor=request.user.actor
        )
        return Response(
            RunOutputSerializer(run).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


@extend_schema_view(
    get=extend_schema(
        summary="Get a reflection run",
        examples=[OpenApiExample("A run", value=RUN_EXAMPLE, response_only=True)],
    )
)
class ReflectionRunDetailApi(RetrieveApi):
    selector = reflection_run_get
    OutputSerializer = RunOutputSerializer


PROFILE_EXAMPLE = {
    "id": "7b8c9d0e-1f2a-4b3c-8d4e-5f6a7b8c9d0e",
    "agent": "support-bot",
    "memory_user": "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01",
    "text": "- name: Ada\n- city: Porto\n- routine: green tea every morning",
    "method": "offline",
    "facts_used": 2,
    "entries_used": 1,
    "refreshed_at": "2026-11-23T14:41:09.102113Z",
}


@extend_schema_view(
    get=extend_schema(
        summary="List cached profiles written by reflection",
        examples=[OpenApiExample("Ada's profile", value=PROFILE_EXAMPLE, response_only=True)],
    )
)
class ReflectionProfileListApi(ListApi):
    """Each person's compact profile as an agent knows them, rebuilt by every reflection run."""

    selector = reflection_profile_list
    filterset_class = ReflectionProfileFilter
    OutputSerializer = ProfileOutputSerializer
    operation_id = "reflection_profiles_list"
