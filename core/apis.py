from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_workspace_key
from core.memory_settings import memory_settings_for
from core.pagination import LimitOffsetPagination, paginate
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


# Agents keep their own views (core/tests/apis/test_server_errors.py fails their selectors
# through this module's names); they read a replica like the tier lists (core.api_views).
class AgentListApi(APIView):
    pagination_class = LimitOffsetPagination
    read_replica = True

    class InputSerializer(StrictSerializer):
        slug = serializers.SlugField(max_length=100)
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        memory_settings = serializers.DictField(required=False)

    @extend_schema(responses=AgentOutputSerializer(many=True), operation_id="agents_list")
    def get(self, request):
        return paginate(
            queryset=agent_list(principal=request.user),
            serializer_class=AgentOutputSerializer,
            request=request,
            view=self,
        )

    @extend_schema(request=InputSerializer, responses={201: AgentOutputSerializer})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A new agent is a workspace-level act: an agent-bound key acts only for its own agent.
        require_workspace_key(request.user)
        agent = agent_register(workspace=request.user.workspace, **serializer.validated_data)
        return Response(AgentOutputSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentDetailApi(APIView):
    read_replica = True

    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        memory_settings = serializers.DictField(
            required=False, help_text="Keys to override; a null value restores the default."
        )

    @extend_schema(responses=AgentOutputSerializer)
    def get(self, request, slug):
        return Response(AgentOutputSerializer(agent_get(principal=request.user, slug=slug)).data)

    @extend_schema(request=InputSerializer, responses=AgentOutputSerializer)
    def patch(self, request, slug):
        agent = agent_get(principal=request.user, slug=slug)
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
