"""Evidence of a memory, and purge by source."""

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.serializers import StrictSerializer
from provenance.selectors import TIERS, derived_preview, evidence_get
from provenance.services import derived_purge
from threads.selectors import message_get, thread_get

ENTRY_ID = "0b3c4d5e-6f70-4182-93a4-b5c6d7e8f901"
MESSAGE_ID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
THREAD_ID = "4f2a9c1e-7b3d-4e5f-a6b7-c8d9e0f1a2b3"
EVIDENCE_EXAMPLE = {
    "tier": "entry",
    "id": ENTRY_ID,
    "content": "Ada's card payments failed because billing read the old card.",
    "evidence": "billing still has the old card on file",
    "source": "verified_assistant_finding",
    "origin": "llm",
    "thread": {"id": THREAD_ID, "title": "Card declined"},
    "messages": [
        {
            "id": MESSAGE_ID,
            "role": "assistant",
            "content": "Found it: billing still has the old card on file.",
            "node_id": "",
            "created_at": "2026-11-23T14:40:52.957998Z",
        }
    ],
    "episode": None,
    "created": {
        "at": "2026-11-23T14:40:53.118204Z",
        "actor": "system",
        "action": "create",
        "changes": {"source": "verified_assistant_finding", "decision": "add"},
    },
    "confirmations": {"count": 1, "last_at": "2026-11-24T09:12:03.118204Z"},
    "replaces": [],
    "replaced_by": None,
    "audit": {
        "events": [
            {
                "at": "2026-11-23T14:40:53.118204Z",
                "actor": "system",
                "action": "create",
                "changes": {"source": "verified_assistant_finding", "decision": "add"},
            }
        ],
        "truncated": False,
    },
}


@extend_schema_serializer(component_name="Evidence")
class EvidenceOutputSerializer(serializers.Serializer):
    tier = serializers.ChoiceField(choices=TIERS)
    id = serializers.UUIDField()
    content = serializers.CharField(help_text="The memory itself (a fact as `key: value`).")
    evidence = serializers.CharField(help_text="The quoted evidence (an episode's feedback comment).")
    source = serializers.CharField()
    origin = serializers.CharField(help_text="How it was made: llm, offline, client, direct, human, ...")
    thread = serializers.DictField(allow_null=True, help_text="The source thread, when the key may read it.")
    messages = serializers.ListField(
        child=serializers.DictField(), help_text="The source messages, oldest first."
    )
    episode = serializers.DictField(allow_null=True)
    created = serializers.DictField(allow_null=True, help_text="The audit event that created it.")
    confirmations = serializers.DictField()
    replaces = serializers.ListField(child=serializers.DictField(), help_text="Earlier versions it replaced.")
    replaced_by = serializers.DictField(allow_null=True, help_text="The later version that replaced it.")
    audit = serializers.DictField(help_text="Every change, oldest first (`events`, `truncated`).")
    derived = serializers.DictField(
        required=False, help_text="Episodes: the facts and procedures learned from it."
    )
    episodes = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="Procedures: the episodes it was learned from.",
    )
    runs = serializers.ListField(child=serializers.DictField(), required=False)
    contradictions = serializers.DictField(required=False, help_text="Procedures: failed runs.")


class EvidenceApi(APIView):
    @extend_schema(
        summary="Why the agent believes an entry, fact, episode or procedure",
        responses=EvidenceOutputSerializer,
        examples=[OpenApiExample("An extracted entry", value=EVIDENCE_EXAMPLE, response_only=True)],
    )
    def get(self, request, tier, item_id):
        data = evidence_get(principal=request.user, tier=tier, item_id=item_id)
        return Response(EvidenceOutputSerializer(data).data)


class DerivedCountSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    ids = serializers.ListField(child=serializers.UUIDField(), help_text="The first 20.")


@extend_schema_serializer(component_name="Derived")
class DerivedOutputSerializer(serializers.Serializer):
    entries = DerivedCountSerializer()
    facts = DerivedCountSerializer()
    procedures = DerivedCountSerializer(help_text="Learned procedures not yet approved.")


class ThreadDerivedApi(APIView):
    """What was derived from a thread, or one of its messages: preview (GET) and purge (POST)."""

    @extend_schema_serializer(component_name="ThreadDerivedQuery")
    class FilterSerializer(StrictSerializer):
        message = serializers.UUIDField(
            required=False, help_text="Only what this message of the thread backs."
        )

    @extend_schema_serializer(component_name="ThreadDerivedPurge")
    class InputSerializer(StrictSerializer):
        message = serializers.UUIDField(
            required=False, help_text="Only what this message of the thread backs."
        )

    @extend_schema_serializer(component_name="ThreadDerivedPurged")
    class PurgedOutputSerializer(serializers.Serializer):
        entries = serializers.IntegerField()
        facts = serializers.IntegerField()
        procedures = serializers.IntegerField()

    def _source(self, request, thread_id, data):
        thread = thread_get(principal=request.user, thread_id=thread_id, related=False)
        message_id = data.get("message")
        message = message_get(thread=thread, message_id=message_id) if message_id else None
        return thread, message

    @extend_schema(
        summary="Preview what was derived from a thread or one of its messages",
        parameters=[FilterSerializer],
        responses=DerivedOutputSerializer,
        examples=[
            OpenApiExample(
                "Two entries and a fact",
                value={
                    "entries": {"count": 2, "ids": [ENTRY_ID, "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"]},
                    "facts": {"count": 1, "ids": ["2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a"]},
                    "procedures": {"count": 0, "ids": []},
                },
                response_only=True,
            )
        ],
    )
    def get(self, request, thread_id):
        # A plain dict: as form input, an empty `?message=` would read as no message and
        # preview the whole thread.
        params = self.FilterSerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        thread, message = self._source(request, thread_id, params.validated_data)
        return Response(
            DerivedOutputSerializer(
                derived_preview(principal=request.user, thread=thread, message=message)
            ).data
        )

    @extend_schema(
        summary="Delete what was derived from a thread or one of its messages",
        description="Entries, facts and learned procedures not yet approved that this thread (or "
        "message) backs; the thread and its messages stay. One transaction, each row audited. An "
        "agent-bound key deletes only its agent's rows.",
        request=InputSerializer,
        responses=PurgedOutputSerializer,
        examples=[
            OpenApiExample("One message", value={"message": MESSAGE_ID}, request_only=True),
            OpenApiExample("Purged", value={"entries": 2, "facts": 1, "procedures": 0}, response_only=True),
        ],
    )
    def post(self, request, thread_id):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        thread, message = self._source(request, thread_id, serializer.validated_data)
        counts = derived_purge(principal=request.user, thread=thread, message=message)
        return Response(self.PurgedOutputSerializer(counts).data)
