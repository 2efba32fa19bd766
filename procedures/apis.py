from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.permissions import SAFE_METHODS
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
    procedure_change_authorize,
    procedure_create,
    procedure_delete,
    procedure_record_run,
    procedure_update,
    procedures_learn,
)

PROCEDURE_ID = "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
PROCEDURE_EXAMPLE = {
    "id": PROCEDURE_ID,
    "agent": "support-bot",
    "name": "Refund an order",
    "description": "Apologise, check the order, refund it.",
    "trigger_conditions": {"goal_contains": ["refund"]},
    "procedure_type": "prompt_template",
    "content": {"template": "Say sorry, look the order up, then refund it."},
    "origin": "human",
    "source_episode_ids": ["a3b4c5d6-e7f8-4a9b-8c0d-1e2f3a4b5c6d"],
    "parent": None,
    "version": 1,
    "is_active": True,
    "times_used": 12,
    "success_count": 11,
    "failure_count": 1,
    "success_rate": 0.9167,
    "average_duration_ms": 3400.0,
    "last_used_at": "2026-11-23T14:40:57.015549Z",
    "created_by": "api_key:3d1aeaa037c0",
    "created_at": "2026-11-20T10:00:00.000000Z",
    "similarity": None,
}
PROCEDURE_RESPONSE = OpenApiExample("A procedure", value=PROCEDURE_EXAMPLE, response_only=True)
PROCEDURES_DELETED_RESPONSE = OpenApiExample(
    "Deleted", value={"procedures": 1, "children_unlinked": 0}, response_only=True
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


@extend_schema_view(get=extend_schema(summary="List procedures", examples=[PROCEDURE_RESPONSE]))
class ProcedureListApi(ListApi):
    selector = procedure_list
    OutputSerializer = ProcedureOutputSerializer
    filterset_class = ProcedureFilter
    operation_id = "procedures_list"

    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(
            max_length=100, required=False, allow_blank=True, help_text="Omit for a workspace-wide procedure."
        )
        name = serializers.CharField(
            max_length=200, required=False, allow_blank=True, help_text="Required unless `parent` is given."
        )
        description = serializers.CharField(required=False, allow_blank=True)
        trigger_conditions = serializers.JSONField(required=False)
        procedure_type = serializers.ChoiceField(choices=Procedure.ProcedureType.choices)
        content = serializers.JSONField()
        origin = serializers.ChoiceField(choices=Procedure.Origin.choices, required=False)
        source_episode_ids = serializers.ListField(
            child=serializers.UUIDField(), required=False, max_length=1000
        )
        parent = serializers.UUIDField(required=False, allow_null=True, help_text="Evolve this procedure.")

        # procedure_create needs a name, or a parent whose name the new version takes.
        required_any_of = (("name",), ("parent",))

    @extend_schema(
        summary="Create a procedure, or evolve one into a new version",
        request=InputSerializer,
        responses={201: ProcedureOutputSerializer},
        examples=[
            OpenApiExample(
                "How to refund",
                value={
                    "agent": "support-bot",
                    "name": "Refund an order",
                    "description": "Apologise, check the order, refund it.",
                    "trigger_conditions": {"goal_contains": ["refund"]},
                    "procedure_type": "prompt_template",
                    "content": {"template": "Say sorry, look the order up, then refund it."},
                },
                request_only=True,
            ),
            OpenApiExample(
                "A new version of it",
                value={
                    "parent": PROCEDURE_ID,
                    "procedure_type": "prompt_template",
                    "content": {"template": "Say sorry, check the return window, then refund."},
                },
                request_only=True,
            ),
            PROCEDURE_RESPONSE,
        ],
    )
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
            workspace=request.user.workspace,
            agent=agent,
            parent=parent,
            actor=request.user.actor,
            principal=request.user,
            **data,
        )
        return Response(ProcedureOutputSerializer(procedure).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(summary="Get a procedure", examples=[PROCEDURE_RESPONSE]),
    patch=extend_schema(
        summary="Edit or deactivate a procedure",
        examples=[
            OpenApiExample("Deactivate", value={"is_active": False}, request_only=True),
            PROCEDURE_RESPONSE,
        ],
    ),
    delete=extend_schema(summary="Delete a procedure", examples=[PROCEDURES_DELETED_RESPONSE]),
)
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

    def get_object(self, request, **kwargs):
        procedure = super().get_object(request, **kwargs)
        # An agent-bound key reads a workspace-wide procedure but may not change it: a 403
        # before any 400, as the row's 404 comes before it.
        if request.method not in SAFE_METHODS:
            procedure_change_authorize(principal=request.user, procedure=procedure)
        return procedure


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

    @extend_schema(
        summary="Find the procedures whose triggers fire for a goal",
        request=InputSerializer,
        responses=ProcedureMatchResultsOutputSerializer,
        examples=[
            OpenApiExample(
                "A refund on Telegram",
                value={
                    "goal": "I need a refund for order 4411",
                    "agent": "support-bot",
                    "context": {"channel": "telegram"},
                },
                request_only=True,
            ),
            OpenApiExample(
                "One match",
                value={
                    "results": [{"score": 2.0, "matched": ["goal_contains"], "procedure": PROCEDURE_EXAMPLE}]
                },
                response_only=True,
            ),
        ],
    )
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

    @extend_schema(
        summary="Record one use of a procedure",
        request=InputSerializer,
        responses=ProcedureOutputSerializer,
        examples=[
            OpenApiExample(
                "It worked in 1.2 s", value={"success": True, "duration_ms": 1200}, request_only=True
            ),
            PROCEDURE_RESPONSE,
        ],
    )
    def post(self, request, procedure_id):
        procedure = procedure_get(principal=request.user, procedure_id=procedure_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        procedure = procedure_record_run(procedure=procedure, **serializer.validated_data)
        return Response(ProcedureOutputSerializer(procedure).data)


@extend_schema_view(
    post=extend_schema(
        summary="Delete several procedures",
        examples=[
            OpenApiExample("One procedure", value={"ids": [PROCEDURE_ID]}, request_only=True),
            PROCEDURES_DELETED_RESPONSE,
        ],
    )
)
class ProcedureBatchDeleteApi(BatchDeleteApi):
    service = procedure_batch_delete
    OutputSerializer = ProcedureDeleteOutputSerializer


class ProcedureLearnOutputSerializer(serializers.Serializer):
    proposed = ProcedureOutputSerializer(
        many=True, help_text="Procedures proposed by this pass: self-learned and inactive until activated."
    )
    runs_counted = serializers.IntegerField(help_text="Episodes newly counted as runs of a procedure.")
    evidence_added = serializers.IntegerField(
        help_text="Successful episodes appended to the evidence of procedures proposed earlier."
    )
    episodes_scanned = serializers.IntegerField(help_text="Closed episodes of the window read by the pass.")


class ProcedureLearnApi(APIView):
    """Run a learning pass now: count episodes as runs, propose procedures from repeated
    successes. A workspace key learns from every agent's episodes, or from `agent`'s; an
    agent-bound key only from its own agent's."""

    class InputSerializer(StrictSerializer):
        agent = serializers.SlugField(
            max_length=100, required=False, allow_blank=True, help_text="Only this agent's episodes."
        )

    @extend_schema(
        summary="Learn procedures from episodes now",
        request=InputSerializer,
        responses=ProcedureLearnOutputSerializer,
        examples=[
            OpenApiExample("One agent", value={"agent": "support-bot"}, request_only=True),
            OpenApiExample(
                "One proposal",
                value={
                    "proposed": [
                        {
                            **PROCEDURE_EXAMPLE,
                            "name": "Learned: order refund",
                            "origin": "self_learned",
                            "is_active": False,
                            "procedure_type": "tool_sequence",
                            "content": [{"tool": "lookup_order"}, {"tool": "refund_order"}],
                            "trigger_conditions": {"goal_contains_all": ["order", "refund"]},
                            "created_by": "system:learning",
                        }
                    ],
                    "runs_counted": 3,
                    "evidence_added": 0,
                    "episodes_scanned": 42,
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_resolve_optional(request.user, serializer.validated_data.get("agent"), create=False)
        result = procedures_learn(workspace=request.user.workspace, agent=agent)
        return Response(ProcedureLearnOutputSerializer(result).data)
