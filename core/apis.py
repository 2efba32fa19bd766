from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from core.access import require_workspace_key
from core.api_views import ListApi, RetrieveApi
from core.memory_settings import memory_settings_for
from core.selectors import agent_get, agent_list, readiness_check
from core.serializers import StrictSerializer
from core.services import agent_register, agent_update


class AgentOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    slug = serializers.SlugField()
    name = serializers.CharField()
    memory_settings = serializers.JSONField(help_text="Only the keys this agent overrides.")
    effective_memory_settings = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_effective_memory_settings(self, agent) -> dict:
        return memory_settings_for(agent).as_dict()


class AgentListApi(ListApi):
    selector = agent_list
    OutputSerializer = AgentOutputSerializer
    operation_id = "agents_list"

    class InputSerializer(StrictSerializer):
        slug = serializers.SlugField(max_length=100)
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        memory_settings = serializers.DictField(required=False)

    @extend_schema(request=InputSerializer, responses={201: AgentOutputSerializer})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A new agent is a workspace-level act: an agent-bound key acts only for its own agent.
        require_workspace_key(request.user)
        agent = agent_register(workspace=request.user.workspace, **serializer.validated_data)
        return Response(AgentOutputSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentDetailApi(RetrieveApi):
    selector = agent_get
    OutputSerializer = AgentOutputSerializer

    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        memory_settings = serializers.DictField(
            required=False, help_text="Keys to override; a null value restores the default."
        )

    @extend_schema(request=InputSerializer, responses=AgentOutputSerializer)
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
    checks = readiness_check()
    ready = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "unready", "checks": checks}, status=200 if ready else 503
    )
