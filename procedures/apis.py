from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import agent_resolve_optional, references_resolve
from core.api_views import BatchDeleteApi, ListApi, RetrieveUpdateDestroyApi
from core.errors import ApplicationError
from core.lib.escaping import strip_invisible_json
from core.serializers import StrictSerializer
from episodes.models import Episode
from procedures.filters import ProcedureFilter
from procedures.models import Procedure
from procedures.selectors import procedure_get, procedure_list, procedure_match
from procedures.services import (
    PROCEDURE_EPISODES_UNKNOWN,
    procedure_batch_delete,
    procedure_create,
    procedure_delete,
    procedure_record_run,
    procedure_update,
)


class ProcedureOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug", read_only=True, allow_null=True)
    name = serializers.CharField()
    description = serializers.CharField()
    trigger_conditions = serializers.JSONField()
    procedure_type = serializers.CharField()
    content = serializers.JSONField()
    origin = serializers.CharField()
    source_episode_ids = serializers.ListField(child=serializers.UUIDField())
    parent = serializers.UUIDField(source="parent_id", allow_null=True)
    version = serializers.IntegerField()
    is_active = serializers.BooleanField()
    times_used = serializers.IntegerField()
    success_count = serializers.IntegerField()
    failure_count = serializers.IntegerField()
    success_rate = serializers.FloatField(allow_null=True)
    average_duration_ms = serializers.FloatField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    similarity = serializers.FloatField(
        default=None, read_only=True, allow_null=True, help_text="Set when found semantically by recall."
    )


class ProcedureDeleteOutputSerializer(serializers.Serializer):
    procedures = serializers.IntegerField(help_text="Procedures deleted.")
    children_unlinked = serializers.IntegerField(
        help_text="Procedures evolved from them, kept without a parent."
    )


class ProcedureListApi(ListApi):
    selector = procedure_list
    OutputSerializer = ProcedureOutputSerializer
    filterset_class = ProcedureFilter
    operation_id = "procedures_list"

    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(
            max_length=100, required=False, allow_blank=True, help_text="Omit for a workspace-wide procedure."
        )
        name = serializers.CharField(max_length=200, required=False, allow_blank=True)
        description = serializers.CharField(required=False, allow_blank=True)
        trigger_conditions = serializers.JSONField(required=False)
        procedure_type = serializers.ChoiceField(choices=Procedure.ProcedureType.choices)
        content = serializers.JSONField()
        origin = serializers.ChoiceField(choices=Procedure.Origin.choices, required=False)
        source_episode_ids = serializers.ListField(
            child=serializers.UUIDField(), required=False, max_length=1000
        )
        parent = serializers.UUIDField(required=False, allow_null=True, help_text="Evolve this procedure.")

    @extend_schema(request=InputSerializer, responses={201: ProcedureOutputSerializer})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        slug = data.pop("agent", None)
        agent = agent_resolve_optional(request.user, slug)
        parent_id = data.pop("parent", None)
        parent = procedure_get(principal=request.user, procedure_id=parent_id) if parent_id else None
        if data.get("source_episode_ids"):
            # In the key's read scope: another agent's episode answers like an unknown id.
            episodes = references_resolve(
                Episode.objects.only("pk"),
                request.user,
                data["source_episode_ids"],
                not_found=ApplicationError(
                    PROCEDURE_EPISODES_UNKNOWN, fields={"source_episode_ids": [PROCEDURE_EPISODES_UNKNOWN]}
                ),
            )
            data["source_episode_ids"] = [episode.pk for episode in episodes]
        procedure = procedure_create(
            workspace=request.user.workspace, agent=agent, parent=parent, actor=request.user.actor, **data
        )
        return Response(ProcedureOutputSerializer(procedure).data, status=status.HTTP_201_CREATED)


class ProcedureDetailApi(RetrieveUpdateDestroyApi):
    selector = procedure_get
    update_service = procedure_update
    delete_service = procedure_delete
    OutputSerializer = ProcedureOutputSerializer
    DeleteOutputSerializer = ProcedureDeleteOutputSerializer

    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=200, required=False)
        description = serializers.CharField(required=False, allow_blank=True)
        trigger_conditions = serializers.JSONField(required=False)
        procedure_type = serializers.ChoiceField(choices=Procedure.ProcedureType.choices, required=False)
        content = serializers.JSONField(required=False)
        is_active = serializers.BooleanField(required=False)


class ProcedureMatchOutputSerializer(serializers.Serializer):
    score = serializers.FloatField()
    matched = serializers.ListField(child=serializers.CharField())
    procedure = ProcedureOutputSerializer()


class ProcedureMatchResultsOutputSerializer(serializers.Serializer):
    results = ProcedureMatchOutputSerializer(many=True, help_text="Best first; at most `limit`.")


class ProcedureMatchApi(APIView):
    """Procedures whose trigger conditions fire for a goal and context, best first."""

    read_only_safe = True
    # A search over rows that change rarely; the caller that just wrote one is pinned to the
    # primary (core.lib.replica), so it finds it.
    read_replica = True

    class InputSerializer(StrictSerializer):
        goal = serializers.CharField(max_length=5000)
        agent = serializers.SlugField(max_length=100, required=False, allow_blank=True)
        context = serializers.DictField(required=False, help_text='e.g. {"channel": "telegram"}.')
        limit = serializers.IntegerField(min_value=1, max_value=100, default=10)

    OutputSerializer = ProcedureMatchOutputSerializer

    @extend_schema(request=InputSerializer, responses=ProcedureMatchResultsOutputSerializer)
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        slug = data.get("agent")
        agent = agent_resolve_optional(request.user, slug, create=False)
        matches = procedure_match(
            workspace=request.user.workspace,
            goal=data["goal"],
            agent=agent,
            context=data.get("context"),
            limit=data["limit"],
        )
        # The agent hands the matched steps to its model: cleaned like every other answer for one.
        return Response(strip_invisible_json({"results": self.OutputSerializer(matches, many=True).data}))


class ProcedureRunApi(APIView):
    """Record one use of a procedure (atomic counters)."""

    class InputSerializer(StrictSerializer):
        success = serializers.BooleanField()
        # A year; the running total is a bigint column that this keeps far from overflowing.
        duration_ms = serializers.IntegerField(
            min_value=0, max_value=365 * 24 * 3600 * 1000, required=False, allow_null=True
        )

    @extend_schema(request=InputSerializer, responses=ProcedureOutputSerializer)
    def post(self, request, procedure_id):
        procedure = procedure_get(principal=request.user, procedure_id=procedure_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        procedure = procedure_record_run(procedure=procedure, **serializer.validated_data)
        return Response(ProcedureOutputSerializer(procedure).data)


class ProcedureBatchDeleteApi(BatchDeleteApi):
    service = procedure_batch_delete
    OutputSerializer = ProcedureDeleteOutputSerializer
