"""The store's REST API: items by (namespace, key), search, namespaces, and LangGraph batches.

Every view acts in one partition (`store.selectors.store_partition`): the key's agent for an
agent-bound key, else the agent the request names, else the workspace's own.
"""

from django.conf import settings
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import reference_resolve, require_write
from core.api_views import BatchDeleteApi, ListApi
from core.errors import NotFoundError
from core.serializers import StrictSerializer
from identities.models import MemoryUser
from identities.selectors import MEMORY_USER_NOT_FOUND
from store.filters import StoreItemFilter
from store.models import KEY_MAX_LENGTH, LABEL_MAX_LENGTH, NAMESPACE_SEPARATOR
from store.selectors import (
    STORE_ITEM_NOT_FOUND,
    store_item_get,
    store_item_list,
    store_item_search,
    store_namespaces_list,
    store_partition,
)
from store.services import (
    GetRequest,
    ListNamespacesRequest,
    SearchRequest,
    namespace_clean,
    put_request_clean,
    store_batch,
    store_item_batch_delete,
    store_item_delete,
    store_item_put,
    store_items_refresh_ttl,
)

OP_UNKNOWN = "op must be one of: get, put, search, list_namespaces."
OP_NOT_OBJECT = "Each op must be a JSON object."
MATCH_TYPE_HELP = '"prefix" or "suffix"; a "*" label matches any label.'

STORE_ITEM_EXAMPLE = {
    "namespace": ["memories", "ada"],
    "key": "home",
    "value": {"text": "Ada lives in Lisbon.", "since": "2026-05"},
    "created_at": "2026-11-23T14:40:53.447020Z",
    "updated_at": "2026-11-23T14:40:53.447020Z",
    "expires_at": None,
}
STORE_ITEM_RESPONSE = OpenApiExample("An item", value=STORE_ITEM_EXAMPLE, response_only=True)


def _labels(**kwargs):
    # Blank labels pass the field and are refused by namespace_clean with LangGraph's reason.
    child = serializers.CharField(max_length=LABEL_MAX_LENGTH, allow_blank=True, trim_whitespace=False)
    return serializers.ListField(child=child, max_length=settings.STORE_NAMESPACE_MAX_DEPTH, **kwargs)


def _key_field():
    return serializers.CharField(max_length=KEY_MAX_LENGTH, trim_whitespace=False)


def _limit_field(default: int):
    return serializers.IntegerField(
        min_value=0, max_value=settings.STORE_SEARCH_MAX_LIMIT, required=False, default=default
    )


def _offset_field():
    return serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False, default=0)


class PartitionInputSerializer(StrictSerializer):
    agent = serializers.SlugField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Agent whose partition to act in (implied by an agent-bound key; absent: the workspace's).",
    )


class ItemOutputSerializer(serializers.Serializer):
    namespace = serializers.ListField(child=serializers.CharField())
    key = serializers.CharField()
    value = serializers.JSONField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


class SearchItemOutputSerializer(ItemOutputSerializer):
    score = serializers.FloatField(allow_null=True)


class ItemListOutputSerializer(ItemOutputSerializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug", read_only=True, allow_null=True)
    memory_user = serializers.UUIDField(source="memory_user_id", allow_null=True)
    index_fields = serializers.ListField(child=serializers.CharField())
    ttl_minutes = serializers.FloatField(allow_null=True)
    embedded = serializers.SerializerMethodField()

    def get_embedded(self, item) -> bool:
        return bool(item.embedding_model)


def _search_hits(hits) -> list:
    out = []
    for item, score in hits:
        item.score = score
        out.append(SearchItemOutputSerializer(item).data)
    return out


def _namespace_param(value: str | None) -> tuple:
    labels = (value or "").split(NAMESPACE_SEPARATOR) if value else []
    return namespace_clean(labels)


class ItemQuerySerializer(PartitionInputSerializer):
    namespace = serializers.CharField(
        # Every label a put accepts, with the dots between them.
        max_length=(LABEL_MAX_LENGTH + 1) * settings.STORE_NAMESPACE_MAX_DEPTH,
        trim_whitespace=False,
        help_text='Dotted labels, e.g. "memories.ada".',
    )
    key = _key_field()
    refresh_ttl = serializers.BooleanField(required=False, default=True)


class StoreItemApi(APIView):
    """One item by namespace and key: read, write (upsert), delete."""

    @extend_schema_serializer(component_name="StoreItemPutInput")
    class InputSerializer(PartitionInputSerializer):
        namespace = _labels()
        key = _key_field()
        value = serializers.DictField()
        index = serializers.JSONField(
            required=False,
            allow_null=True,
            help_text="false, null (the whole value) or a list of JSON paths.",
        )
        ttl = serializers.FloatField(
            required=False, allow_null=True, help_text="Minutes; null: never expires."
        )
        memory_user = serializers.UUIDField(required=False, allow_null=True)
        wait = serializers.BooleanField(
            required=False, default=False, help_text="Embed before answering (else on commit, by a worker)."
        )

    @extend_schema(
        parameters=[ItemQuerySerializer],
        responses=ItemOutputSerializer,
        operation_id="store_item_get",
        summary="Get an item by namespace and key",
        examples=[STORE_ITEM_RESPONSE],
    )
    def get(self, request):
        query = ItemQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        agent = store_partition(principal=request.user, agent=data.get("agent"))
        item = store_item_get(
            workspace=request.user.workspace,
            agent=agent,
            namespace=_namespace_param(data["namespace"]),
            key=data["key"],
        )
        if item is None:
            raise NotFoundError(STORE_ITEM_NOT_FOUND)
        if data["refresh_ttl"] and request.user.can_write:
            store_items_refresh_ttl(items=[item])
        return Response(ItemOutputSerializer(item).data)

    @extend_schema(
        request=InputSerializer,
        responses={201: ItemOutputSerializer, 200: ItemOutputSerializer},
        description="Store a JSON object at (namespace, key); the same place again replaces it (200).",
        operation_id="store_item_put",
        summary="Put an item at a namespace and key",
        examples=[
            OpenApiExample(
                "Where Ada lives, searchable by its text",
                value={
                    "agent": "support-bot",
                    "namespace": ["memories", "ada"],
                    "key": "home",
                    "value": {"text": "Ada lives in Lisbon.", "since": "2026-05"},
                    "index": ["text"],
                },
                request_only=True,
            ),
            STORE_ITEM_RESPONSE,
        ],
    )
    def put(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        principal = request.user
        require_write(principal)
        agent = store_partition(principal=principal, agent=data.get("agent"), create=True)
        memory_user = reference_resolve(
            MemoryUser.objects.all(),
            principal,
            data.get("memory_user"),
            agent_field=None,
            not_found=NotFoundError(MEMORY_USER_NOT_FOUND, fields={"memory_user": [MEMORY_USER_NOT_FOUND]}),
        )
        item, created = store_item_put(
            workspace=principal.workspace,
            agent=agent,
            namespace=data["namespace"],
            key=data["key"],
            value=data["value"],
            index=data.get("index"),
            ttl=data.get("ttl"),
            memory_user=memory_user,
            wait=data["wait"],
        )
        return Response(
            ItemOutputSerializer(item).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("namespace", str, required=True, description="Dotted labels."),
            OpenApiParameter("key", str, required=True),
            OpenApiParameter("agent", str),
        ],
        responses={204: None},
        description="Delete the item; deleting one that is not there is not an error (204).",
        operation_id="store_item_delete",
        summary="Delete an item by namespace and key",
    )
    def delete(self, request):
        query = ItemQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        principal = request.user
        require_write(principal)
        agent = store_partition(principal=principal, agent=data.get("agent"))
        store_item_delete(
            workspace=principal.workspace,
            agent=agent,
            namespace=_namespace_param(data["namespace"]),
            key=data["key"],
            actor=principal.actor,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class SearchInputSerializer(PartitionInputSerializer):
    namespace_prefix = _labels(required=False, default=list)
    query = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=10_000)
    filter = serializers.DictField(required=False, allow_null=True)
    limit = _limit_field(10)
    offset = _offset_field()
    refresh_ttl = serializers.BooleanField(required=False, default=True)


class MatchConditionSerializer(StrictSerializer):
    match_type = serializers.ChoiceField(choices=["prefix", "suffix"], help_text=MATCH_TYPE_HELP)
    path = _labels()


class NamespacesInputSerializer(PartitionInputSerializer):
    match_conditions = serializers.ListField(child=MatchConditionSerializer(), required=False, max_length=8)
    max_depth = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1_000)
    limit = _limit_field(100)
    offset = _offset_field()


def _search_request(data) -> SearchRequest:
    return SearchRequest(
        namespace_prefix=namespace_clean(data["namespace_prefix"], name="namespace_prefix", allow_empty=True),
        query=data.get("query"),
        filter=data.get("filter"),
        limit=data["limit"],
        offset=data["offset"],
        refresh_ttl=data["refresh_ttl"],
    )


def _namespaces_request(data) -> ListNamespacesRequest:
    conditions = tuple(
        (
            condition["match_type"],
            namespace_clean(condition["path"], name="match_conditions", allow_empty=True),
        )
        for condition in data.get("match_conditions") or ()
    )
    return ListNamespacesRequest(
        match_conditions=conditions,
        max_depth=data.get("max_depth"),
        limit=data["limit"],
        offset=data["offset"],
    )


class StoreSearchApi(APIView):
    """Items under a namespace prefix, filtered by value fields, ranked by a query when given."""

    read_only_safe = True

    @extend_schema_serializer(component_name="StoreSearchOutput")
    class OutputSerializer(serializers.Serializer):
        items = SearchItemOutputSerializer(many=True)

    @extend_schema(
        request=SearchInputSerializer,
        responses=OutputSerializer,
        operation_id="store_search",
        summary="Search items under a namespace prefix",
        examples=[
            OpenApiExample(
                "Ada's memories about where she lives",
                value={"namespace_prefix": ["memories", "ada"], "query": "where does she live", "limit": 5},
                request_only=True,
            ),
            OpenApiExample(
                "A hit", value={"items": [{**STORE_ITEM_EXAMPLE, "score": 0.83}]}, response_only=True
            ),
        ],
    )
    def post(self, request):
        serializer = SearchInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        search = _search_request(serializer.validated_data)
        principal = request.user
        agent = store_partition(principal=principal, agent=serializer.validated_data.get("agent"))
        hits = store_item_search(
            workspace=principal.workspace,
            agent=agent,
            namespace_prefix=search.namespace_prefix,
            query=search.query,
            filter=search.filter,
            limit=search.limit,
            offset=search.offset,
        )
        if search.refresh_ttl and principal.can_write:
            store_items_refresh_ttl(items=[item for item, _score in hits])
        return Response({"items": _search_hits(hits)})


class StoreNamespacesApi(APIView):
    """The namespaces of the partition, sorted, matched by prefix and suffix, cut to a depth."""

    read_only_safe = True

    @extend_schema_serializer(component_name="StoreNamespacesOutput")
    class OutputSerializer(serializers.Serializer):
        namespaces = serializers.ListField(
            child=serializers.ListField(child=serializers.CharField()), help_text="Each a list of labels."
        )

    @extend_schema(
        request=NamespacesInputSerializer,
        responses=OutputSerializer,
        operation_id="store_namespaces",
        summary="List the namespaces of the partition",
        examples=[
            OpenApiExample(
                "Two levels under memories",
                value={"match_conditions": [{"match_type": "prefix", "path": ["memories"]}], "max_depth": 2},
                request_only=True,
            ),
            OpenApiExample(
                "Namespaces",
                value={"namespaces": [["memories", "ada"], ["memories", "bo"]]},
                response_only=True,
            ),
        ],
    )
    def post(self, request):
        serializer = NamespacesInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        listing = _namespaces_request(serializer.validated_data)
        agent = store_partition(principal=request.user, agent=serializer.validated_data.get("agent"))
        namespaces = store_namespaces_list(
            workspace=request.user.workspace,
            agent=agent,
            match_conditions=listing.match_conditions,
            max_depth=listing.max_depth,
            limit=listing.limit,
            offset=listing.offset,
        )
        return Response({"namespaces": [list(namespace) for namespace in namespaces]})


class GetOpSerializer(StrictSerializer):
    op = serializers.CharField()
    namespace = _labels()
    key = _key_field()
    refresh_ttl = serializers.BooleanField(required=False, default=True)


class PutOpSerializer(StrictSerializer):
    op = serializers.CharField()
    namespace = _labels()
    key = _key_field()
    value = serializers.DictField(allow_null=True, help_text="null deletes the item.")
    index = serializers.JSONField(required=False, allow_null=True)
    ttl = serializers.FloatField(required=False, allow_null=True)


class SearchOpSerializer(SearchInputSerializer):
    op = serializers.CharField()
    agent = None


class ListNamespacesOpSerializer(NamespacesInputSerializer):
    op = serializers.CharField()
    agent = None


_OP_SERIALIZERS = {
    "get": GetOpSerializer,
    "put": PutOpSerializer,
    "search": SearchOpSerializer,
    "list_namespaces": ListNamespacesOpSerializer,
}


def _op_request(op: dict):
    data = _OP_SERIALIZERS[op["op"]](data=op)
    data.is_valid(raise_exception=True)
    data = data.validated_data
    if op["op"] == "get":
        return GetRequest(
            namespace=namespace_clean(data["namespace"]), key=data["key"], refresh_ttl=data["refresh_ttl"]
        )
    if op["op"] == "put":
        return put_request_clean(
            namespace=data["namespace"],
            key=data["key"],
            value=data["value"],
            index=data.get("index"),
            ttl=data.get("ttl"),
        )
    if op["op"] == "search":
        return _search_request(data)
    return _namespaces_request(data)


def _result(op, result):
    if isinstance(op, GetRequest):
        return None if result is None else ItemOutputSerializer(result).data
    if isinstance(op, SearchRequest):
        return _search_hits(result)
    if isinstance(op, ListNamespacesRequest):
        return [list(namespace) for namespace in result]
    return None


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="StoreBatchOp",
        serializers={
            "get": GetOpSerializer,
            "put": PutOpSerializer,
            "search": SearchOpSerializer,
            "list_namespaces": ListNamespacesOpSerializer,
        },
        resource_type_field_name="op",
    )
)
class BatchOpField(serializers.DictField):
    """One op of a batch: a JSON object here, checked by its op's serializer in the view; the
    schema documents each op's own fields."""


class StoreBatchApi(APIView):
    """LangGraph's `batch`: get, put, search and list_namespaces ops in one request.

    Reads see the store as it was before the batch's puts (LangGraph's own stores behave
    so); a put with `value: null` deletes. A batch with puts needs a writable key.
    """

    read_only_safe = True

    @extend_schema_serializer(component_name="StoreBatchInput")
    class InputSerializer(PartitionInputSerializer):
        ops = serializers.ListField(
            child=BatchOpField(),
            max_length=settings.STORE_BATCH_MAX_OPS,
            help_text='Each {"op": "get" | "put" | "search" | "list_namespaces", ...} with that '
            "operation's fields (those of the single-operation endpoints, without `agent`).",
        )
        memory_user = serializers.UUIDField(required=False, allow_null=True)
        wait = serializers.BooleanField(required=False, default=False)

    @extend_schema_serializer(component_name="StoreBatchOutput")
    class OutputSerializer(serializers.Serializer):
        results = serializers.ListField(
            child=serializers.JSONField(allow_null=True),
            help_text="One per op: an item or null (get), a list of items (search), a list of "
            "namespaces (list_namespaces), null (put).",
        )

    @extend_schema(
        request=InputSerializer,
        responses=OutputSerializer,
        operation_id="store_batch",
        summary="Run a batch of get, put, search and list_namespaces ops",
        examples=[
            OpenApiExample(
                "A put and a get",
                value={
                    "agent": "support-bot",
                    "ops": [
                        {
                            "op": "put",
                            "namespace": ["memories", "ada"],
                            "key": "pet",
                            "value": {"text": "A cat, Miso."},
                        },
                        {"op": "get", "namespace": ["memories", "ada"], "key": "home"},
                    ],
                },
                request_only=True,
            ),
            OpenApiExample(
                "Results, one per op", value={"results": [None, STORE_ITEM_EXAMPLE]}, response_only=True
            ),
        ],
    )
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        ops, errors = [], {}
        for index, op in enumerate(data["ops"]):
            # An op named by anything but a string (`"op": {}`) is unknown, not a 500.
            if not isinstance(op.get("op"), str) or op["op"] not in _OP_SERIALIZERS:
                errors[str(index)] = {"op": [OP_UNKNOWN]}
                continue
            try:
                ops.append(_op_request(op))
            except serializers.ValidationError as exc:
                errors[str(index)] = exc.detail
        if errors:
            raise serializers.ValidationError({"ops": errors})
        principal = request.user
        writes = any(not isinstance(op, GetRequest | SearchRequest | ListNamespacesRequest) for op in ops)
        if writes:
            require_write(principal)
        agent = store_partition(principal=principal, agent=data.get("agent"), create=writes)
        memory_user = reference_resolve(
            MemoryUser.objects.all(),
            principal,
            data.get("memory_user"),
            agent_field=None,
            not_found=NotFoundError(MEMORY_USER_NOT_FOUND, fields={"memory_user": [MEMORY_USER_NOT_FOUND]}),
        )
        if not principal.can_write:
            # A read-only key reads; it does not move expiry times.
            ops = [_without_refresh(op) for op in ops]
        results = store_batch(
            workspace=principal.workspace, agent=agent, ops=ops, memory_user=memory_user, wait=data["wait"]
        )
        return Response({"results": [_result(op, result) for op, result in zip(ops, results, strict=True)]})


def _without_refresh(op):
    if isinstance(op, GetRequest | SearchRequest):
        op.refresh_ttl = False
    return op


@extend_schema_view(
    get=extend_schema(
        summary="List the store's items",
        examples=[
            OpenApiExample(
                "An item",
                value={
                    **STORE_ITEM_EXAMPLE,
                    "id": "d4e5f6a7-b8c9-4d0e-8f1a-2b3c4d5e6f70",
                    "agent": "support-bot",
                    "memory_user": "6c1e0f9a-3b7d-4d2e-9f5a-8b2c4d6e1a01",
                    "index_fields": ["text"],
                    "ttl_minutes": None,
                    "embedded": True,
                },
                response_only=True,
            )
        ],
    )
)
class StoreItemListApi(ListApi):
    selector = store_item_list
    OutputSerializer = ItemListOutputSerializer
    filterset_class = StoreItemFilter
    operation_id = "store_items_list"


@extend_schema_view(
    post=extend_schema(
        summary="Delete several store items",
        examples=[
            OpenApiExample(
                "One item", value={"ids": ["d4e5f6a7-b8c9-4d0e-8f1a-2b3c4d5e6f70"]}, request_only=True
            ),
            OpenApiExample("Deleted", value={"deleted": 1}, response_only=True),
        ],
    )
)
class StoreItemBatchDeleteApi(BatchDeleteApi):
    service = store_item_batch_delete

    @extend_schema_serializer(component_name="StoreItemBatchDeleteOutput")
    class OutputSerializer(serializers.Serializer):
        deleted = serializers.IntegerField()
