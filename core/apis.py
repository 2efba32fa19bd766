from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response

from core.access import require_workspace_key
from core.api_views import ListApi, RetrieveApi
from core.memory_settings import memory_settings_for
from core.selectors import agent_get, agent_list, readiness_check
from core.serializers import StrictSerializer
from core.services import agent_register, agent_update

AGENT_EXAMPLE = {
    "id": "35d89998-fe54-481b-8734-dc68c81712c4",
    "slug": "support-bot",
    "name": "Support bot",
    "memory_settings": {"recent_messages": 30},
    "effective_memory_settings": {
        "recent_messages": 30,
        "token_limit": 2000,
        "compaction_threshold": 0.5,
        "model_context_window": 128000,
        "semantic_recall": False,
        "semantic_recall_top_k": 5,
        "episodic_memory": True,
        "auto_inject": True,
        "auto_inject_top_k": 12,
        "dedupe_threshold": 0.86,
        "retention_days": 0,
        "recall_memory_type": "all",
        "recall_limit": 10,
        "recall_min_confidence": 0.5,
    },
    "created_at": "2026-11-23T14:40:52.950234Z",
}
AGENT_RESPONSE = OpenApiExample("An agent", value=AGENT_EXAMPLE, response_only=True)


class AgentOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    slug = serializers.SlugField()
    name = serializers.CharField()
    memory_settings = serializers.JSONField(help_text="Only the keys this agent overrides.")
    effective_memory_settings = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_effective_memory_settings(self, agent) -> dict:
        return memory_settings_for(agent).as_dict()


@extend_schema_view(get=extend_schema(summary="List the workspace's agents", examples=[AGENT_RESPONSE]))
class AgentListApi(ListApi):
    selector = agent_list
    OutputSerializer = AgentOutputSerializer
    operation_id = "agents_list"

    class InputSerializer(StrictSerializer):
        slug = serializers.SlugField(max_length=100)
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        memory_settings = serializers.DictField(required=False)

    @extend_schema(
        summary="Register an agent",
        request=InputSerializer,
        responses={201: AgentOutputSerializer},
        examples=[
            OpenApiExample(
                "A support bot keeping more history",
                value={
                    "slug": "support-bot",
                    "name": "Support bot",
                    "memory_settings": {"recent_messages": 30},
                },
                request_only=True,
            ),
            AGENT_RESPONSE,
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A new agent is a workspace-level act: an agent-bound key acts only for its own agent.
        require_workspace_key(request.user)
        agent = agent_register(workspace=request.user.workspace, **serializer.validated_data)
        return Response(AgentOutputSerializer(agent).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(summary="Get an agent and its effective memory settings", examples=[AGENT_RESPONSE])
)
class AgentDetailApi(RetrieveApi):
    selector = agent_get
    OutputSerializer = AgentOutputSerializer

    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        memory_settings = serializers.DictField(
            required=False, help_text="Keys to override; a null value restores the default."
        )

    @extend_schema(
        summary="Rename an agent or override its memory settings",
        request=InputSerializer,
        responses=AgentOutputSerializer,
        examples=[
            OpenApiExample(
                "Keep 30 recent messages, restore the default token limit",
                value={"memory_settings": {"recent_messages": 30, "token_limit": None}},
                request_only=True,
            ),
            AGENT_RESPONSE,
        ],
    )
    def patch(self, request, slug):
        agent = self.get_object(request, slug=slug)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_update(agent=agent, **serializer.validated_data)
        return Response(AgentOutputSerializer(agent).data)


@never_cache
def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request):
    """200 when this process can serve; else 503 with each failing check's `reason` listed."""
    checks = readiness_check()
    reasons = [check.get("reason", f"{name}_failed") for name, check in checks.items() if not check["ok"]]
    body = {"status": "unready" if reasons else "ready", "reasons": reasons, "checks": checks}
    warnings = [check["warning"] for check in checks.values() if check.get("warning")]
    if warnings:
        body["warnings"] = warnings
    response = JsonResponse(body, status=503 if reasons else 200)
    if "warming" in reasons:
        # Expected for the first seconds of every process, as is a worker that has not beaten
        # yet when the whole stack starts: not an error for django.request's log. Once warm, a
        # 503 is logged.
        response._has_been_logged = True
    return response
