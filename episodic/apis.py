from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_write
from core.api_views import BatchDeleteApi, ListApi, RetrieveUpdateDestroyApi
from core.errors import ApplicationError
from core.lib.escaping import strip_invisible_json
from core.serializers import ContextInputSerializer, StrictSerializer
from episodic.filters import EpisodicEntryFilter
from episodic.models import EpisodicEntry
from episodic.selectors import entry_get, entry_list, entry_render_memory_block, entry_search_hybrid
from episodic.services import entry_batch_delete, entry_delete, entry_extract, entry_update

AGENT_AND_USER_REQUIRED = "Name the person (`memory_user`, or a `thread` that has one)."
TRANSCRIPT_OR_THREAD = "Send `transcript` or `thread` messages to extract from."


class EntryOutputSerializer(serializers.Serializer):
    """An episodic entry; its vectors are never exposed."""

    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug", help_text="Agent slug.")
    memory_user = serializers.UUIDField(source="memory_user_id")
    content = serializers.CharField()
    content_hash = serializers.CharField()
    source = serializers.CharField()
    evidence = serializers.CharField()
    source_thread = serializers.UUIDField(source="source_thread_id", allow_null=True)
    source_message_ids = serializers.ListField(child=serializers.CharField())
    metadata = serializers.JSONField()
    status = serializers.CharField()
    embedded = serializers.SerializerMethodField(help_text="Whether a vector of some model is stored.")
    embedding_model = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_embedded(self, entry) -> bool:
        return bool(entry.embedding_model)


def _context(principal, data, *, create_agent: bool):
    from threads.selectors import memory_context_resolve

    context = memory_context_resolve(
        principal=principal,
        agent=data.get("agent") or None,
        memory_user=data.get("memory_user"),
        thread=data.get("thread"),
        create_agent=create_agent,
    )
    if context.agent is None:
        from core.access import agent_resolve

        agent_resolve(principal, None)  # Raises the "pass `agent`" error.
    if context.memory_user is None:
        raise ApplicationError(AGENT_AND_USER_REQUIRED, fields={"memory_user": [AGENT_AND_USER_REQUIRED]})
    return context


class EntryListApi(ListApi):
    """Episodic entries visible to the key, newest first; filters as query parameters."""

    selector = entry_list
    OutputSerializer = EntryOutputSerializer
    filterset_class = EpisodicEntryFilter


class EntryDetailApi(RetrieveUpdateDestroyApi):
    selector = entry_get
    update_service = entry_update
    delete_service = entry_delete
    OutputSerializer = EntryOutputSerializer

    class InputSerializer(StrictSerializer):
        content = serializers.CharField(required=False, max_length=100_000)
        status = serializers.ChoiceField(choices=EpisodicEntry.Status.choices, required=False)
        source = serializers.ChoiceField(choices=EpisodicEntry.Source.choices, required=False)
        metadata = serializers.JSONField(required=False)

        def validate_metadata(self, value):
            if not isinstance(value, dict):
                raise serializers.ValidationError("Must be an object.")
            return value


class BatchDeleteOutputSerializer(serializers.Serializer):
    deleted = serializers.IntegerField()
    not_found = serializers.ListField(child=serializers.UUIDField())


class QueuedOutputSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["queued"])


class EntryBatchDeleteApi(BatchDeleteApi):
    """Delete the listed entries; ids the key cannot see are reported in `not_found`."""

    service = entry_batch_delete
    OutputSerializer = BatchDeleteOutputSerializer


class TranscriptMessageSerializer(StrictSerializer):
    id = serializers.CharField(required=False, max_length=100)
    role = serializers.ChoiceField(choices=["user", "assistant", "system", "tool"])
    content = serializers.CharField(allow_blank=True, max_length=100_000)


class CandidateSerializer(StrictSerializer):
    # Loose on purpose: a bad candidate is a per-candidate rejection, not a 400 for the turn.
    content = serializers.CharField(allow_blank=True, max_length=100_000)
    source = serializers.CharField(allow_blank=True, max_length=100)
    evidence = serializers.CharField(allow_blank=True, required=False, default="", max_length=100_000)


class RejectedSerializer(serializers.Serializer):
    content = serializers.CharField()
    source = serializers.CharField()
    evidence = serializers.CharField()
    origin = serializers.ChoiceField(choices=["llm", "client"])
    reason = serializers.CharField()
    similarity = serializers.FloatField(required=False)
    duplicate_of = serializers.CharField(required=False)


class EntryExtractApi(APIView):
    """Extract episodic entries from a finished turn (validation rules in docs/episodic.md).

    Asynchronous by default (202, a task runs the extraction); `"sync": true` answers with
    the stored entries and every rejected candidate with its reason.
    """

    class InputSerializer(ContextInputSerializer):
        transcript = TranscriptMessageSerializer(many=True, required=False)
        last_messages = serializers.IntegerField(
            required=False, min_value=1, max_value=200, default=20, help_text="With `thread`: how many."
        )
        candidates = CandidateSerializer(many=True, required=False, max_length=100)
        use_llm = serializers.BooleanField(default=True)
        known_memory = serializers.CharField(required=False, allow_blank=True, default="", max_length=100_000)
        known_profile = serializers.CharField(
            required=False, allow_blank=True, default="", max_length=100_000
        )
        sync = serializers.BooleanField(default=False)

        def validate_transcript(self, value):
            limit = settings.EPISODIC_TRANSCRIPT_MAX_MESSAGES
            if len(value) > limit:
                raise serializers.ValidationError(f"At most {limit} messages.")
            return value

    class OutputSerializer(serializers.Serializer):
        stored = EntryOutputSerializer(many=True)
        rejected = RejectedSerializer(many=True)
        facts = serializers.ListField(child=serializers.DictField())
        llm_used = serializers.BooleanField()
        llm_error = serializers.CharField()

    @extend_schema(request=InputSerializer, responses={200: OutputSerializer, 202: QueuedOutputSerializer})
    def post(self, request):
        principal = request.user
        require_write(principal)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        context = _context(principal, data, create_agent=True)
        transcript = [dict(m) for m in data.get("transcript") or []]
        if not transcript and context.thread is not None:
            from threads.models import Message

            rows = (
                Message.objects.filter(thread=context.thread, role__in=("user", "assistant"))
                .exclude(content="")
                .order_by("-seq")
                .values("id", "role", "content")[: data["last_messages"]]
            )
            transcript = [{**row, "id": str(row["id"])} for row in reversed(rows)]
        if not transcript:
            raise ApplicationError(TRANSCRIPT_OR_THREAD, fields={"transcript": [TRANSCRIPT_OR_THREAD]})
        kwargs = {
            "transcript": transcript,
            "candidates": [dict(c) for c in data.get("candidates") or []],
            "use_llm": data["use_llm"],
            "known_memory": data["known_memory"],
            "known_profile": data["known_profile"],
            "actor": principal.actor,
        }
        if not data["sync"]:
            from episodic.tasks import entry_extract_task

            entry_extract_task.delay_on_commit(
                str(context.agent.pk),
                str(context.memory_user.pk),
                thread_id=str(context.thread.pk) if context.thread else None,
                **kwargs,
            )
            return Response({"status": "queued"}, status=status.HTTP_202_ACCEPTED)
        result = entry_extract(
            agent=context.agent, memory_user=context.memory_user, thread=context.thread, **kwargs
        )
        body = self.OutputSerializer(
            {
                "stored": result.stored,
                "rejected": result.rejected,
                "facts": result.facts,
                "llm_used": result.llm_used,
                "llm_error": result.llm_error,
            }
        ).data
        return Response(body, status=status.HTTP_200_OK)


class EntryHitSerializer(serializers.Serializer):
    score = serializers.FloatField()
    entry = EntryOutputSerializer()


class EntrySearchApi(APIView):
    """`recall_memory(query)`: the person's entries most related to `query`, best first."""

    read_only_safe = True
    # Entries are written by an extraction task seconds to minutes after the turn, so a
    # search is already that far behind; a replica's second adds nothing an agent relies on.
    read_replica = True

    class InputSerializer(ContextInputSerializer):
        query = serializers.CharField(allow_blank=True, trim_whitespace=False)
        top_k = serializers.IntegerField(required=False, min_value=1, max_value=100)
        mode = serializers.ChoiceField(choices=["hybrid", "lexical", "vector"], default="hybrid")
        render = serializers.BooleanField(default=False, help_text="Also return the <memory> block.")

    class OutputSerializer(serializers.Serializer):
        results = serializers.ListField(child=EntryHitSerializer())
        plan = serializers.CharField(allow_null=True, help_text="Vector plan used: exact or hnsw.")
        memory = serializers.CharField(required=False)

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request):
        from core.memory_settings import memory_settings_for

        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        context = _context(request.user, data, create_agent=False)
        top_k = data.get("top_k") or memory_settings_for(context.agent).auto_inject_top_k
        result = entry_search_hybrid(
            agent=context.agent,
            memory_user=context.memory_user,
            query=data["query"],
            top_k=top_k,
            mode=data["mode"],
        )
        body = {
            "results": [
                {"score": round(hit.score, 6), "entry": EntryOutputSerializer(hit.entry).data}
                for hit in result.hits
            ],
            "plan": result.plan,
        }
        if data["render"]:
            body["memory"] = entry_render_memory_block([hit.entry for hit in result.hits])
        # The `recall_memory` tool's result, read by a model (core.lib.escaping).
        return Response(strip_invisible_json(body))
