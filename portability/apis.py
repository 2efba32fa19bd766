"""GET /export/ (the workspace, an agent or a person, streamed as JSONL) and POST /import/."""

import json
import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import agent_resolve, reference_resolve, require_workspace_key, require_write
from core.errors import NotFoundError
from core.serializers import StrictSerializer
from identities.models import MemoryUser
from portability.registry import Scope
from portability.responses import NDJSON, export_response
from portability.selectors import import_job_get
from portability.services import export_stream, import_job_progress, import_run, lines_read
from portability.services.jobs import import_job_record

JOB_EXAMPLE = {
    "id": "3a4b5c6d-7e8f-4a1b-9c2d-3e4f5a6b7c8d",
    "status": "done",
    "dry_run": False,
    "file_name": "acme.jsonl",
    "progress": {"done": 1834, "total": 1834, "lines": 412, "percent": 100},
    "report": {"created": {"memory_user": 3, "thread": 4, "message": 400}, "reused": {}, "conflicts": []},
    "error": None,
    "created_at": "2026-11-23T14:40:52.957998Z",
    "finished_at": "2026-11-23T14:40:55.112004Z",
}
HEADER_EXAMPLE = {
    "format": "memory-export",
    "version": 1,
    "source": "acme-prod",
    "embedding_model": "all-MiniLM-L6-v2",
    "dimensions": 384,
    "scope": {"kind": "workspace", "history": False, "vectors": False},
    "exported_at": "2026-11-23T14:40:00+00:00",
}


class ImportHeaderSerializer(StrictSerializer):
    """A JSON object body is an export's header line alone: an empty export (docs/export.md)."""

    format = serializers.ChoiceField(choices=["memory-export"])
    version = serializers.IntegerField(min_value=1, max_value=1)
    source = serializers.CharField(max_length=100)
    embedding_model = serializers.CharField(max_length=200, allow_blank=True)
    exported_at = serializers.DateTimeField()
    dimensions = serializers.IntegerField(min_value=1, max_value=16000, required=False, allow_null=True)
    scope = serializers.DictField(required=False)


class ImportJobOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField()
    dry_run = serializers.BooleanField()
    file_name = serializers.CharField()
    progress = serializers.SerializerMethodField()
    report = serializers.JSONField()
    error = serializers.JSONField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "done": {"type": "integer"},
                "total": {"type": "integer"},
                "lines": {"type": "integer"},
                "percent": {"type": "integer"},
            },
        }
    )
    def get_progress(self, job) -> dict:
        return import_job_progress(job)


class ExportApi(APIView):
    class FilterSerializer(StrictSerializer):
        agent = serializers.SlugField(max_length=100, required=False)
        memory_user = serializers.UUIDField(required=False)
        history = serializers.BooleanField(required=False, default=False)
        vectors = serializers.BooleanField(required=False, default=False)

    @extend_schema(
        operation_id="export_memory",
        parameters=[
            OpenApiParameter("agent", str, description="Export this agent's rows only."),
            OpenApiParameter("memory_user", OpenApiTypes.UUID, description="Export this person's rows only."),
            OpenApiParameter(
                "history", bool, description="Closed fact and entry versions, and the audit trail."
            ),
            OpenApiParameter("vectors", bool, description="Vectors of the workspace's embedding model."),
        ],
        summary="Export the workspace, an agent or a person as JSON lines",
        responses={(200, NDJSON): OpenApiResponse(OpenApiTypes.STR, description="docs/export.md")},
        examples=[
            OpenApiExample(
                "A header, one record, the end",
                value=json.dumps(HEADER_EXAMPLE)
                + "\n"
                + json.dumps(
                    {"type": "agent", "id": "9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", "slug": "support-bot"}
                )
                + "\n"
                + json.dumps({"type": "end", "count": 1})
                + "\n",
                response_only=True,
                media_type=NDJSON,
            )
        ],
    )
    def get(self, request):
        """The memory of the workspace, one agent or one person, as JSON lines (docs/export.md).

        An agent-bound key exports only its agent's rows."""
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        principal = request.user
        agent = None
        if principal.agent is not None or data.get("agent"):
            agent = agent_resolve(principal, data.get("agent"), create=False)
        person = reference_resolve(
            MemoryUser.objects.all(),
            principal,
            data.get("memory_user"),
            not_found=NotFoundError("Memory user not found."),
            agent_field=None,
        )
        # Both named: the agent's rows about that person.
        scope = Scope(
            workspace=principal.workspace,
            agent=agent,
            memory_user=person,
            history=data["history"],
            vectors=data["vectors"],
        )
        return export_response(export_stream(scope=scope), kind=scope.kind)


class ImportApi(APIView):
    class FilterSerializer(StrictSerializer):
        dry_run = serializers.BooleanField(required=False, default=False)

    @extend_schema(
        operation_id="import_memory",
        parameters=[
            OpenApiParameter("dry_run", bool, description="Report what would be created; store nothing.")
        ],
        summary="Import an export (JSON lines) into this workspace, all or nothing",
        request={NDJSON: OpenApiTypes.STR, "application/json": ImportHeaderSerializer},
        responses={
            200: ImportJobOutputSerializer,
            201: ImportJobOutputSerializer,
        },
        examples=[
            OpenApiExample("An empty export: its header alone", value=HEADER_EXAMPLE, request_only=True),
            OpenApiExample("Imported", value=JOB_EXAMPLE, response_only=True, status_codes=["201"]),
            OpenApiExample(
                "Dry run", value={**JOB_EXAMPLE, "dry_run": True}, response_only=True, status_codes=["200"]
            ),
        ],
    )
    def post(self, request):
        """Import an export (the body, JSON lines) into this workspace: all of it or nothing.

        Needs a writable workspace-wide key. A line that cannot be stored answers 400 with its
        number in `fields.line`. Ids are remapped; a second import of the same export creates
        nothing. Bodies are limited to API_MAX_BODY_BYTES: larger files go through
        `manage.py import_memory` or the Export/Import page of /memories."""
        principal = request.user
        require_write(principal)
        require_workspace_key(principal)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        dry_run = filters.validated_data["dry_run"]
        run = uuid.uuid4()
        size = int(request.META.get("CONTENT_LENGTH") or 0)
        report = import_run(
            workspace=principal.workspace,
            lines=lines_read(request._request),
            actor=principal.actor,
            dry_run=dry_run,
            run=run,
        )
        job = import_job_record(
            workspace=principal.workspace,
            actor=principal.actor,
            dry_run=dry_run,
            report=report,
            error=None,
            size=size,
        )
        code = status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED
        return Response(ImportJobOutputSerializer(job).data, status=code)


class ImportJobDetailApi(APIView):
    @extend_schema(
        operation_id="import_job_retrieve",
        summary="Read an import job: progress, then its report or error",
        responses=ImportJobOutputSerializer,
        examples=[OpenApiExample("Done", value=JOB_EXAMPLE, response_only=True)],
    )
    def get(self, request, job_id):
        """An import's status: progress while it runs, its report or error once it ended."""
        job = import_job_get(principal=request.user, job_id=job_id)
        return Response(ImportJobOutputSerializer(job).data)
