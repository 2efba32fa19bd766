"""The retention API: a workspace's rules with the preview of the next run, rule writes, and
runs. Retention reaches every agent's rows, so agent-bound keys are refused (403)."""

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_workspace_key
from core.serializers import StrictSerializer
from retention.models import Tier
from retention.selectors import (
    retention_preview,
    retention_rule_get,
    retention_rule_list,
    retention_run_list,
)
from retention.services import retention_rule_delete, retention_rule_set, retention_run_request

RULE_ID = "5e4d3c2b-1a09-4f8e-8d7c-6b5a4f3e2d1c"
RULE_EXAMPLE = {
    "id": RULE_ID,
    "tier": "messages",
    "agent": None,
    "max_age_days": 90,
    "keep_latest": None,
    "changed_by": "api_key:3d1aeaa037c0",
    "updated_at": "2026-11-23T14:41:02.179850Z",
}
RUN_EXAMPLE = {
    "id": 12,
    "state": "done",
    "trigger": "schedule",
    "started_at": "2026-11-23T12:31:00.102113Z",
    "finished_at": "2026-11-23T12:31:04.917002Z",
    "deleted": {"messages": 1234, "checkpoints": 56},
    "error": "",
}
PREVIEW_EXAMPLE = {
    "deletes": dict.fromkeys(Tier.values, 0) | {"messages": 1234, "checkpoints": 56},
    "messages_waiting_for_summary": 40,
}


@extend_schema_serializer(component_name="RetentionRule")
class RuleOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    tier = serializers.ChoiceField(choices=Tier.choices)
    agent = serializers.SerializerMethodField(help_text="The agent's slug; null: the workspace's rule.")
    max_age_days = serializers.IntegerField(allow_null=True)
    keep_latest = serializers.IntegerField(allow_null=True)
    changed_by = serializers.CharField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_agent(self, rule) -> str | None:
        return rule.agent.slug if rule.agent_id else None


@extend_schema_serializer(component_name="RetentionRun")
class RunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    trigger = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    deleted = serializers.DictField(child=serializers.IntegerField(), help_text="Rows deleted per tier.")
    error = serializers.CharField()


@extend_schema_serializer(component_name="RetentionPreview")
class PreviewOutputSerializer(serializers.Serializer):
    deletes = serializers.DictField(
        child=serializers.IntegerField(), help_text="Rows the next run deletes, per tier."
    )
    messages_waiting_for_summary = serializers.IntegerField(
        help_text="Messages past their limits that no summary holds yet: kept until a compaction "
        "(which the run requests) covers them."
    )


class RetentionApi(APIView):
    @extend_schema_serializer(component_name="RetentionOutput")
    class OutputSerializer(serializers.Serializer):
        rules = RuleOutputSerializer(many=True)
        preview = PreviewOutputSerializer()
        runs = RunOutputSerializer(many=True, help_text="The latest runs, newest first.")

    @extend_schema(
        summary="Read the workspace's retention rules and what the next run deletes",
        responses=OutputSerializer,
        examples=[
            OpenApiExample(
                "Messages kept 90 days",
                value={"rules": [RULE_EXAMPLE], "preview": PREVIEW_EXAMPLE, "runs": [RUN_EXAMPLE]},
                response_only=True,
            )
        ],
    )
    def get(self, request):
        require_workspace_key(request.user)
        workspace = request.user.workspace
        data = {
            "rules": retention_rule_list(workspace=workspace),
            "preview": retention_preview(workspace=workspace),
            "runs": retention_run_list(workspace=workspace, limit=5),
        }
        return Response(self.OutputSerializer(data).data)


class RetentionRuleListApi(APIView):
    @extend_schema_serializer(component_name="RetentionRuleInput")
    class InputSerializer(StrictSerializer):
        tier = serializers.ChoiceField(choices=Tier.choices)
        agent = serializers.SlugField(
            max_length=100,
            required=False,
            allow_null=True,
            help_text="Omitted or null: the workspace's rule.",
        )
        max_age_days = serializers.IntegerField(
            min_value=1,
            max_value=36_500,
            allow_null=True,
            help_text="Delete rows older than this; null: no age limit (then keep_latest is required).",
        )
        keep_latest = serializers.IntegerField(
            min_value=1,
            max_value=10_000_000,
            required=False,
            allow_null=True,
            help_text="Keep the newest N of each group (per thread for messages and run snapshots, "
            "per thread and namespace for checkpoints, per agent and person for the rest).",
        )

    @extend_schema(
        summary="Set the retention rule of a tier (for the workspace or one agent)",
        request=InputSerializer,
        responses={200: RuleOutputSerializer},
        examples=[
            OpenApiExample(
                "Messages 90 days", value={"tier": "messages", "max_age_days": 90}, request_only=True
            ),
            OpenApiExample("A rule", value=RULE_EXAMPLE, response_only=True),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        rule = retention_rule_set(
            principal=request.user,
            tier=data["tier"],
            agent_slug=data.get("agent"),
            max_age_days=data.get("max_age_days"),
            keep_latest=data.get("keep_latest"),
        )
        return Response(RuleOutputSerializer(rule).data, status=status.HTTP_200_OK)


class RetentionRuleDetailApi(APIView):
    @extend_schema(summary="Remove a retention rule", responses={204: None})
    def delete(self, request, rule_id):
        require_workspace_key(request.user)
        rule = retention_rule_get(principal=request.user, rule_id=rule_id)
        retention_rule_delete(principal=request.user, rule=rule)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RetentionRunListApi(APIView):
    @extend_schema_serializer(component_name="RetentionRuns")
    class OutputSerializer(serializers.Serializer):
        runs = RunOutputSerializer(many=True, help_text="The latest 20 runs, newest first.")

    @extend_schema(
        summary="List the latest retention runs",
        responses=OutputSerializer,
        examples=[OpenApiExample("Runs", value={"runs": [RUN_EXAMPLE]}, response_only=True)],
    )
    def get(self, request):
        require_workspace_key(request.user)
        runs = retention_run_list(workspace=request.user.workspace)
        return Response(self.OutputSerializer({"runs": runs}).data)

    @extend_schema_serializer(component_name="RetentionRunQueued")
    class QueuedOutputSerializer(serializers.Serializer):
        status = serializers.CharField()

    @extend_schema(
        summary="Run retention now",
        description="Queues a run of every rule of the workspace; 409 `retention_running` while one "
        "is running.",
        request=None,
        responses={202: QueuedOutputSerializer},
        examples=[
            OpenApiExample("Queued", value={"status": "queued"}, response_only=True, status_codes=[202])
        ],
    )
    def post(self, request):
        retention_run_request(principal=request.user)
        return Response({"status": "queued"}, status=status.HTTP_202_ACCEPTED)
