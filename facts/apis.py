from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import reference_resolve, require_write
from core.api_views import BatchDeleteApi, ListApi, RetrieveDestroyApi
from core.errors import NotFoundError
from core.lib.escaping import strip_invisible_json
from core.pagination import LimitOffsetPagination, paginate
from core.serializers import ContextInputSerializer, StrictSerializer
from facts.filters import FactFilter
from facts.models import Fact
from facts.selectors import fact_get, fact_history, fact_list, fact_lookup, with_effective_confidence
from facts.services import fact_batch_delete, fact_delete, fact_remember, fact_touch, fact_update
from facts.services.access import fact_change_authorize, fact_delete_authorize
from facts.services.remember import SOURCE_EPISODE_NOT_FOUND, SOURCE_MESSAGE_NOT_FOUND
from threads.selectors import memory_context_for_write, memory_context_resolve

FACT_NOT_FOUND_FOR_KEY = "No fact with this key is visible in this context."

ADA_ID = "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01"
FACT_ID = "eb44ad85-3ad8-4402-aa88-566df426c9ad"
PREVIOUS_FACT_ID = "1d2c3b4a-5968-4776-8594-a3b2c1d0e9f8"
FACT_EXAMPLE = {
    "id": FACT_ID,
    "key": "city",
    "value": "Lisbon",
    "scope": "user",
    "fact_type": "user_preference",
    "agent": "support-bot",
    "memory_user": ADA_ID,
    "thread": None,
    "confidence": 0.9,
    "effective_confidence": 0.9,
    "times_confirmed": 1,
    "times_contradicted": 0,
    "source": "agent_tool",
    "source_message": "9b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e61",
    "source_episode": None,
    "evidence": "I moved to Lisbon.",
    "valid_from": "2026-11-23T14:40:54.605595Z",
    "valid_to": None,
    "is_current": True,
    "superseded_by": None,
    "access_count": 3,
    "last_accessed_at": "2026-11-23T15:02:11.480116Z",
    "created_by": "api_key:3d1aeaa037c0",
    "created_at": "2026-11-23T14:40:54.607118Z",
    "similarity": None,
}
FACT_RESPONSE = OpenApiExample("A fact", value=FACT_EXAMPLE, response_only=True)
FACTS_DELETED_RESPONSE = OpenApiExample("Deleted", value={"facts": 1}, response_only=True)
REMEMBER_EXAMPLES = [
    OpenApiExample(
        "Where Ada lives, quoting her",
        value={
            "agent": "support-bot",
            "memory_user": ADA_ID,
            "key": "city",
            "value": "Lisbon",
            "scope": "user",
            "fact_type": "user_preference",
            "source": "agent_tool",
            "source_message": "9b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e61",
            "evidence": "I moved to Lisbon.",
        },
        request_only=True,
    ),
    OpenApiExample(
        "A new value superseded the old one",
        value={
            "outcome": "superseded",
            "fact": FACT_EXAMPLE,
            "previous": PREVIOUS_FACT_ID,
            "consolidation": None,
        },
        response_only=True,
        status_codes=[201],
    ),
    OpenApiExample(
        "The same value confirmed",
        value={
            "outcome": "confirmed",
            "fact": {**FACT_EXAMPLE, "times_confirmed": 2},
            "previous": None,
            "consolidation": None,
        },
        response_only=True,
        status_codes=[200],
    ),
]


class FactOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    key = serializers.CharField()
    value = serializers.JSONField()
    scope = serializers.CharField()
    fact_type = serializers.CharField()
    agent = serializers.CharField(source="agent.slug", read_only=True, allow_null=True)
    memory_user = serializers.UUIDField(source="memory_user_id", allow_null=True)
    thread = serializers.UUIDField(source="thread_id", allow_null=True)
    confidence = serializers.FloatField()
    effective_confidence = serializers.SerializerMethodField(
        help_text="Confidence after the optional half-life decay (equal to confidence when it is off)."
    )
    times_confirmed = serializers.IntegerField()
    times_contradicted = serializers.IntegerField()
    source = serializers.CharField()
    source_message = serializers.UUIDField(source="source_message_id", allow_null=True)
    source_episode = serializers.UUIDField(source="source_episode_id", allow_null=True)
    evidence = serializers.CharField()
    valid_from = serializers.DateTimeField()
    valid_to = serializers.DateTimeField(allow_null=True)
    is_current = serializers.BooleanField()
    superseded_by = serializers.UUIDField(source="superseded_by_id", allow_null=True)
    access_count = serializers.IntegerField()
    last_accessed_at = serializers.DateTimeField(allow_null=True)
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    similarity = serializers.SerializerMethodField(
        help_text="Cosine similarity to the recall query when the fact was found semantically."
    )

    def get_similarity(self, fact) -> float | None:
        return getattr(fact, "similarity", None)

    def get_effective_confidence(self, fact) -> float:
        return round(getattr(fact, "effective_confidence", fact.confidence), 6)


class FactDeleteOutputSerializer(serializers.Serializer):
    facts = serializers.IntegerField(help_text="Facts deleted.")


class RememberInputSerializer(ContextInputSerializer):
    key = serializers.CharField(max_length=255)
    value = serializers.JSONField()
    scope = serializers.ChoiceField(choices=Fact.Scope.choices)
    fact_type = serializers.ChoiceField(choices=Fact.FactType.choices, default=Fact.FactType.WORLD_KNOWLEDGE)
    confidence = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    source = serializers.ChoiceField(
        choices=[Fact.Source.API, Fact.Source.AGENT_TOOL, Fact.Source.EXTRACTION], default=Fact.Source.API
    )
    source_message = serializers.UUIDField(required=False, allow_null=True)
    source_episode = serializers.UUIDField(required=False, allow_null=True)
    evidence = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
    overwrite = serializers.BooleanField(default=True)


class RememberOutputSerializer(serializers.Serializer):
    outcome = serializers.CharField(
        help_text="created, confirmed, superseded or skipped; held (stored for review, docs/review.md) "
        "or rejected (this value was rejected in review)."
    )
    fact = FactOutputSerializer()
    previous = serializers.UUIDField(allow_null=True, help_text="The version this one superseded.")
    consolidation = serializers.JSONField(
        allow_null=True,
        help_text="A new key reconciled with a current fact of another key that says the same thing: "
        "{decision (add, update, supersede or noop), reason, by (llm or rule), old, new}; a `noop` "
        "answers the old fact, confirmed. Null for same-key remembering.",
    )


def _remember(request, data) -> tuple[dict, int]:
    from episodes.models import Episode
    from threads.models import Message

    principal = request.user
    require_write(principal)
    # An agent named for the first time is registered by fact_remember's write, not before.
    context = memory_context_for_write(
        principal=principal,
        agent=data.get("agent") or None,
        memory_user=data.get("memory_user"),
        thread=data.get("thread"),
    )
    # Resolved in the key's read scope: another agent's row answers like an unknown id.
    source_message = reference_resolve(
        Message.objects.all(),
        principal,
        data.get("source_message"),
        agent_field="thread__agent",
        not_found=NotFoundError(
            SOURCE_MESSAGE_NOT_FOUND, fields={"source_message": [SOURCE_MESSAGE_NOT_FOUND]}
        ),
    )
    source_episode = reference_resolve(
        Episode.objects.all(),
        principal,
        data.get("source_episode"),
        not_found=NotFoundError(
            SOURCE_EPISODE_NOT_FOUND, fields={"source_episode": [SOURCE_EPISODE_NOT_FOUND]}
        ),
    )
    result = fact_remember(
        workspace=principal.workspace,
        key=data["key"],
        value=data["value"],
        scope=data["scope"],
        fact_type=data["fact_type"],
        agent=context.agent,
        memory_user=context.memory_user,
        thread=context.thread,
        confidence=data.get("confidence"),
        source=data["source"],
        source_message=source_message,
        source_episode=source_episode,
        evidence=data.get("evidence", ""),
        overwrite=data["overwrite"],
        actor=principal.actor,
        principal=principal,
    )
    # The `remember` tool's result, read by a model (core.lib.escaping).
    body = strip_invisible_json(
        RememberOutputSerializer(
            {
                "outcome": result.outcome,
                "fact": result.fact,
                "previous": result.previous.pk if result.previous else None,
                "consolidation": result.consolidation,
            }
        ).data
    )
    return body, status.HTTP_201_CREATED if result.outcome in (
        "created",
        "superseded",
        "held",
    ) else status.HTTP_200_OK


class FactRememberApi(APIView):
    """The `remember` tool: same value confirms, a different one supersedes (or is skipped
    with overwrite=false).

    A global fact is every agent's: with a key bound to an agent, a different value for a
    global key that has a current version (or a new key that would supersede one) is not
    applied but stored held for an operator's review (outcome `held`, 201); the current
    value stays what every agent reads. Confirming a global fact and creating a global key
    that has none apply as usual."""

    @extend_schema(
        summary="Remember a fact (the `remember` tool)",
        request=RememberInputSerializer,
        responses={201: RememberOutputSerializer, 200: RememberOutputSerializer},
        examples=REMEMBER_EXAMPLES,
    )
    def post(self, request):
        serializer = RememberInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        body, code = _remember(request, serializer.validated_data)
        return Response(body, status=code)


@extend_schema_view(
    get=extend_schema(summary="List facts", examples=[FACT_RESPONSE]),
    post=extend_schema(summary="Remember a fact (as POST /facts/remember/)"),
)
class FactListApi(ListApi):
    """List facts (current versions unless `current=false|all`) or remember one."""

    selector = fact_list
    OutputSerializer = FactOutputSerializer
    filterset_class = FactFilter
    operation_id = "facts_list"

    # Remembering through the collection is the `remember` tool, schema included.
    post = FactRememberApi.post


class FactLookupApi(APIView):
    """The current value of a key from the most specific scope: session, user, agent, global."""

    class FilterSerializer(ContextInputSerializer):
        key = serializers.CharField(max_length=255)

    @extend_schema(
        summary="Look up a key's current value in the most specific scope",
        parameters=[FilterSerializer],
        responses=FactOutputSerializer,
        examples=[FACT_RESPONSE],
    )
    def get(self, request):
        serializer = self.FilterSerializer(data=request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        context = memory_context_resolve(
            principal=request.user,
            agent=data.get("agent") or None,
            memory_user=data.get("memory_user"),
            thread=data.get("thread"),
        )
        fact = fact_lookup(
            workspace=context.workspace,
            key=data["key"],
            agent=context.agent,
            memory_user=context.memory_user,
            thread=context.thread,
        )
        if fact is None:
            raise NotFoundError(FACT_NOT_FOUND_FOR_KEY)
        if request.user.can_write:
            # Read-only keys may look up; only writable keys leave access statistics behind.
            fact_touch(fact_ids=[fact.pk])
        fact = with_effective_confidence(Fact.objects.filter(pk=fact.pk)).select_related("agent").get()
        return Response(FactOutputSerializer(fact).data)


@extend_schema_view(
    get=extend_schema(summary="Get a fact", examples=[FACT_RESPONSE]),
    delete=extend_schema(summary="Delete a fact", examples=[FACTS_DELETED_RESPONSE]),
)
class FactDetailApi(RetrieveDestroyApi):
    """One fact version. PATCH and DELETE of a global fact need a workspace-wide key (or an
    operator): with a key bound to an agent they are a 403 `workspace_key_required` and
    nothing changes, except that such a key may DELETE (withdraw) its agent's own proposal
    while it is held for review. Facts of a user, an agent or a session are not concerned."""

    selector = fact_get
    delete_service = fact_delete
    OutputSerializer = FactOutputSerializer
    DeleteOutputSerializer = FactDeleteOutputSerializer

    def get_object(self, request, **kwargs):
        fact = super().get_object(request, **kwargs)
        # An agent-bound key reads a global fact but may not change it: a 403 before any 400,
        # as the row's 404 comes before it. It may withdraw its own held proposal.
        if request.method == "DELETE":
            fact_delete_authorize(fact=fact, principal=request.user)
        elif request.method not in SAFE_METHODS:
            fact_change_authorize(fact=fact, principal=request.user)
        return fact

    # Documented as RetrieveDestroyApi documents its own delete, which this one replaces.
    @extend_schema(responses={200: FactDeleteOutputSerializer})
    def delete(self, request, fact_id):
        fact = self.get_object(request, fact_id=fact_id)
        # Checked again by the service on the locked row (an approval may come in between).
        counts = fact_delete(fact=fact, actor=request.user.actor, principal=request.user)
        return Response(FactDeleteOutputSerializer(counts).data)

    class InputSerializer(StrictSerializer):
        value = serializers.JSONField(required=False, help_text="A new value supersedes this version.")
        fact_type = serializers.ChoiceField(choices=Fact.FactType.choices, required=False)
        confidence = serializers.FloatField(required=False, min_value=0, max_value=1)
        evidence = serializers.CharField(required=False, allow_blank=True, max_length=10_000)

    @extend_schema(
        summary="Correct a fact (a new value supersedes this version)",
        request=InputSerializer,
        responses=FactOutputSerializer,
        examples=[
            OpenApiExample(
                "Ada moved again", value={"value": "Porto", "confidence": 0.95}, request_only=True
            ),
            OpenApiExample(
                "The new version",
                value={**FACT_EXAMPLE, "value": "Porto", "confidence": 0.95, "effective_confidence": 0.95},
                response_only=True,
            ),
        ],
    )
    def patch(self, request, fact_id):
        fact = self.get_object(request, fact_id=fact_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fact = fact_update(
            fact=fact, actor=request.user.actor, principal=request.user, **serializer.validated_data
        )
        return Response(FactOutputSerializer(fact_get(principal=request.user, fact_id=fact.pk)).data)


class FactHistoryApi(APIView):
    """Every version of this fact's key in its scope, newest first."""

    pagination_class = LimitOffsetPagination
    # A list like the others (core.api_views.ListApi), but of one fact's key.
    read_replica = True

    @extend_schema(
        summary="List every version of a fact's key, newest first",
        responses=FactOutputSerializer(many=True),
        examples=[FACT_RESPONSE],
    )
    def get(self, request, fact_id):
        fact = fact_get(principal=request.user, fact_id=fact_id)
        return paginate(
            queryset=fact_history(fact=fact),
            serializer_class=FactOutputSerializer,
            request=request,
            view=self,
        )


@extend_schema_view(
    post=extend_schema(
        summary="Delete several facts (all or none)",
        examples=[
            OpenApiExample("Two facts", value={"ids": [FACT_ID, PREVIOUS_FACT_ID]}, request_only=True),
            OpenApiExample("Deleted", value={"facts": 2}, response_only=True),
        ],
    )
)
class FactBatchDeleteApi(BatchDeleteApi):
    """Delete all the listed facts or none (404 when one is not visible to the key). A key
    bound to an agent that lists a global fact deletes nothing: 403 `workspace_key_required`,
    unless the fact is its agent's own proposal still held for review."""

    service = fact_batch_delete
    OutputSerializer = FactDeleteOutputSerializer


class EpisodeFactCandidateSerializer(StrictSerializer):
    key = serializers.CharField(max_length=255)
    value = serializers.JSONField()
    evidence = serializers.CharField(max_length=2000, help_text="An exact quote of the episode's record.")


class EpisodeFactStoredSerializer(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.JSONField()
    evidence = serializers.CharField()
    outcome = serializers.CharField(help_text="created or confirmed.")
    found_in = serializers.CharField(help_text="Where the quote is: messages[i], input or final_output.")
    fact = FactOutputSerializer()


class EpisodeFactRejectedSerializer(serializers.Serializer):
    key = serializers.JSONField()
    value = serializers.JSONField()
    evidence = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(
        help_text="key_missing, value_missing, evidence_missing, evidence_not_in_episode, "
        "evidence_not_from_user, evidence_too_weak, current_value_differs, over_max_facts, "
        "or fact validation's message."
    )
    fact = FactOutputSerializer(required=False, help_text="The current fact a different value met.")


class EpisodeExtractFactsApi(APIView):
    """Propose and store facts from an episode's record, each citing it with a quote."""

    class InputSerializer(StrictSerializer):
        candidates = EpisodeFactCandidateSerializer(
            many=True,
            required=False,
            max_length=50,
            help_text="Facts to check and store; without them the chat model (or patterns) proposes.",
        )
        use_llm = serializers.BooleanField(
            default=True, help_text="false: propose with the deterministic patterns even with a chat model."
        )

    class OutputSerializer(serializers.Serializer):
        method = serializers.CharField(help_text="given, llm or patterns.")
        llm_error = serializers.CharField(allow_blank=True, help_text="Why the chat model was not used.")
        stored = EpisodeFactStoredSerializer(many=True)
        rejected = EpisodeFactRejectedSerializer(many=True)

    @extend_schema(
        summary="Learn facts from an episode",
        request=InputSerializer,
        responses=OutputSerializer,
        examples=[
            OpenApiExample(
                "A fact quoted from the run",
                value={"candidates": [{"key": "city", "value": "Lisbon", "evidence": "I live in Lisbon"}]},
                request_only=True,
            ),
            OpenApiExample(
                "Stored",
                value={
                    "method": "given",
                    "llm_error": "",
                    "stored": [
                        {
                            "key": "city",
                            "value": "Lisbon",
                            "evidence": "I live in Lisbon",
                            "outcome": "created",
                            "found_in": "messages[0]",
                            "fact": FACT_EXAMPLE,
                        }
                    ],
                    "rejected": [],
                },
                response_only=True,
            ),
        ],
    )
    def post(self, request, episode_id):
        from episodes.selectors import episode_get
        from facts.services.episode_extraction import episode_facts_extract

        require_write(request.user)
        episode = episode_get(principal=request.user, episode_id=episode_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = episode_facts_extract(
            episode=episode,
            candidates=data.get("candidates"),
            use_llm=data["use_llm"],
            actor=request.user.actor,
        )
        body = self.OutputSerializer(result).data
        return Response(strip_invisible_json(body))
