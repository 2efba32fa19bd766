"""GET /export/ (the workspace, an agent or a person, streamed as JSONL), POST /import/ (a job
made of the streamed body) and GET /import/<id>/ (the job)."""

import json

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import agent_resolve, reference_resolve, require_workspace_key, require_write
from core.errors import NotFoundError
from core.serializers import StrictSerializer
from identities.models import MemoryUser
from portability.registry import Scope
from portability.responses import NDJSON, export_response
from portability.selectors import import_job_get
from portability.services import export_stream, import_job_progress, import_job_queue, import_upload_receive
from portability.services.jobs import WORKER_LOST

JOB_EXAMPLE = {
    "id": "3a4b5c6d-7e8f-4a1b-9c2d-3e4f5a6b7c8d",
    "status": "done",
    "dry_run": False,
    "file_name": "acme.jsonl",
    "progress": {"done": 1834, "total": 1834, "lines": 412, "percent": 100},
    "report": {"created": {"memory_user": 3, "thread": 4, "message": 400}, "reused": {}, "conflicts": []},
    "error": None,
    "created_at": "2026-11-23T14:40:52.957998Z",
    "started_at": "2026-11-23T14:40:53.001230Z",
    "heartbeat_at": "2026-11-23T14:40:53.001230Z",
    "attempts": 1,
    "finished_at": "2026-11-23T14:40:55.112004Z",
}
# What a body may be sent as; none (curl --data-binary without -H) is read as JSON lines too.
IMPORT_MEDIA_TYPES = {"", NDJSON, "application/jsonl", "application/json", "application/octet-stream"}
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
    started_at = serializers.DateTimeField(allow_null=True)
    # Written by the worker while it runs; a stale one is a lost worker (the sweep's to handle).
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    attempts = serializers.IntegerField()
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
    # Read as a stream to disk under PORTABILITY_IMPORT_MAX_BYTES, not API_MAX_BODY_BYTES
    # (core.middleware.ApiBodyLimitMiddleware).
    body_streamed = True

    class FilterSerializer(StrictSerializer):
        dry_run = serializers.BooleanField(required=False, default=False)
        file_name = serializers.CharField(required=False, default="", allow_blank=True, max_length=255)

    @extend_schema(
        operation_id="import_memory",
        parameters=[
            OpenApiParameter("dry_run", bool, description="Report what would be created; store nothing."),
            OpenApiParameter("file_name", str, description="A name for the job (the file's, say)."),
            OpenApiParameter(
                "Content-Encoding",
                str,
                OpenApiParameter.HEADER,
                enum=["gzip"],
                description="`gzip`: the body is gzipped; the limit counts its inflated bytes.",
            ),
            OpenApiParameter(
                "Location",
                OpenApiTypes.URI,
                OpenApiParameter.HEADER,
                response=[202],
                description="The job (GET /api/v1/import/{job_id}/), to poll until it ended.",
            ),
        ],
        summary="Queue an import of an export (JSON lines) into this workspace",
        request={NDJSON: OpenApiTypes.STR, "application/json": ImportHeaderSerializer},
        responses={
            202: OpenApiResponse(
                ImportJobOutputSerializer,
                description="Queued. `Location` is the job, to poll until `status` is done or failed.",
            ),
        },
        examples=[
            OpenApiExample("An empty export: its header alone", value=HEADER_EXAMPLE, request_only=True),
            OpenApiExample(
                "Queued",
                value={
                    **JOB_EXAMPLE,
                    "status": "queued",
                    "progress": {"done": 0, "total": 1834, "lines": 0, "percent": 0},
                    "report": {},
                    "started_at": None,
                    "heartbeat_at": None,
                    "attempts": 0,
                    "finished_at": None,
                },
                response_only=True,
                status_codes=["202"],
            ),
        ],
    )
    def post(self, request):
        """Queue an import of an export (the body, JSON lines, optionally gzipped) into this
        workspace; poll the job at `Location` (docs/export.md).

        The body is streamed to disk, never held in memory, up to PORTABILITY_IMPORT_MAX_BYTES
        (2 GB by default; 413 past it, counted after gunzip), and its first line checked: a body
        whose first line is not an export header answers 400 at once (`malformed_header`,
        `unsupported_version`), as does bad gzip; a form, multipart or other media type, or a
        Content-Encoding other than gzip, 415. A worker then imports it all or nothing: a line
        that cannot be stored fails the job, its number in `error.line`. Ids are remapped; a
        second import of the same export creates nothing. Needs a writable workspace-wide key."""
        principal = request.user
        require_write(principal)
        require_workspace_key(principal)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        media_type = request.content_type.split(";")[0].strip().lower()
        if media_type not in IMPORT_MEDIA_TYPES:
            raise UnsupportedMediaType(media_type)
        upload = import_upload_receive(
            stream=request._request,
            content_length=request.META.get("CONTENT_LENGTH"),
            content_encoding=request.META.get("HTTP_CONTENT_ENCODING", ""),
        )
        job = import_job_queue(
            workspace=principal.workspace,
            actor=principal.actor,
            file_name=data["file_name"] or "(request body)",
            upload=upload,
            dry_run=data["dry_run"],
        )
        location = reverse("api:portability:import-detail", kwargs={"job_id": job.pk})
        return Response(
            ImportJobOutputSerializer(job).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": request.build_absolute_uri(location)},
        )


class ImportJobDetailApi(APIView):
    @extend_schema(
        operation_id="import_job_retrieve",
        summary="Read an import job: progress, then its report or error",
        responses=ImportJobOutputSerializer,
        examples=[
            OpenApiExample("Done", value=JOB_EXAMPLE, response_only=True),
            OpenApiExample(
                "Failed: its worker died",
                value={
                    **JOB_EXAMPLE,
                    "status": "failed",
                    "progress": {"done": 0, "total": 1834, "lines": 0, "percent": 0},
                    "report": {},
                    "attempts": 2,
                    "error": {
                        "code": "worker_lost",
                        "message": WORKER_LOST.format(last="2026-11-23T14:41:10+00:00"),
                        "line": 0,
                    },
                },
                response_only=True,
            ),
        ],
    )
    def get(self, request, job_id):
        """An import's status: `queued`, `running` (progress in bytes of the file and records
        read, `heartbeat_at`), then `done` with its report or `failed` with its error; either
        way the file is removed. Nothing of a failed import is stored."""
        job = import_job_get(principal=request.user, job_id=job_id)
        return Response(ImportJobOutputSerializer(job).data)
