"""The base views of the per-tier list, detail and batch-delete endpoints, which share their logic.

Each base is a thin `APIView` whose subclass names what differs as class attributes: the
selector or service to call (a plain function, looked up on the class), the output
serializer and, for a list, its FilterSet. The OpenAPI operation of each inherited method is
built from those same attributes when the subclass is declared, so the schema cannot drift
from what the view answers. A method the subclass writes itself (a create, an update, a
delete with an extra check) is its own and carries its own `extend_schema`.

The bases carry no docstrings on purpose: drf-spectacular takes a view's description from
the nearest class docstring, and a base's would describe every endpoint built on it.
"""

from collections.abc import Callable

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.pagination import LimitOffsetPagination, paginate
from core.serializers import BatchDeleteInputSerializer


def _entity(url_kwargs: dict) -> str:
    """The service argument naming a detail view's row: `fact_id` in the URL -> `fact=`."""
    (lookup,) = url_kwargs
    return lookup.removesuffix("_id")


def _document(view: type[APIView], **schemas) -> None:
    """Give `view` the schema of each method it inherits; a method it defines documents itself."""
    inherited = {method: schema for method, schema in schemas.items() if method not in view.__dict__}
    if inherited:
        extend_schema_view(**inherited)(view)


# GET: one page of `selector(principal=..., filters=<query string>)`, newest first as the
# selector orders it. A list without a FilterSet calls its selector without filters.
# Lists may read from a replica (core.lib.replica): a list is a snapshot anyway, and the
# caller's own writes pin it to the primary for a few seconds.
class ListApi(APIView):
    pagination_class = LimitOffsetPagination
    read_replica = True

    selector: Callable | None = None
    OutputSerializer: type[serializers.Serializer] | None = None
    filterset_class = None
    operation_id: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.OutputSerializer is None:
            return
        filters = cls.filterset_class.base_filters if cls.filterset_class is not None else ()
        _document(
            cls,
            get=extend_schema(
                parameters=[OpenApiParameter(name, str) for name in filters],
                responses=cls.OutputSerializer(many=True),
                operation_id=cls.operation_id,
            ),
        )

    def get(self, request):
        selector = type(self).selector
        if self.filterset_class is None:
            queryset = selector(principal=request.user)
        else:
            queryset = selector(principal=request.user, filters=request.query_params)
        return paginate(queryset=queryset, serializer_class=self.OutputSerializer, request=request, view=self)


# GET: `selector(principal=..., **<URL kwargs>)`, serialized. The URL names the row the way the
# selector's argument is named (`fact_id`, `slug`); a row out of the key's scope is the
# selector's 404. A detail page of a list may read from a replica, like the list.
class RetrieveApi(APIView):
    read_replica = True

    selector: Callable | None = None
    OutputSerializer: type[serializers.Serializer] | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.OutputSerializer is not None:
            _document(cls, get=extend_schema(responses=cls.OutputSerializer))

    def get_object(self, request, **kwargs):
        return type(self).selector(principal=request.user, **kwargs)

    def get(self, request, **kwargs):
        return Response(self.OutputSerializer(self.get_object(request, **kwargs)).data)


# DELETE: the row as GET finds it, handed to `delete_service(<entity>=row, actor=...)`, where
# the URL's `<entity>_id` names the entity (`fact_id` -> `fact=`, the house naming). Answers
# the service's counts through `DeleteOutputSerializer`, or 204 when there is none. Read-only
# keys never get here (nor to PATCH below): HasApiKey refuses unsafe methods for them.
class RetrieveDestroyApi(RetrieveApi):
    delete_service: Callable | None = None
    DeleteOutputSerializer: type[serializers.Serializer] | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.OutputSerializer is None:
            return
        if cls.DeleteOutputSerializer is None:
            responses = {204: None}
        else:
            responses = {200: cls.DeleteOutputSerializer}
        _document(cls, delete=extend_schema(responses=responses))

    def delete(self, request, **kwargs):
        instance = self.get_object(request, **kwargs)
        counts = type(self).delete_service(**{_entity(kwargs): instance}, actor=request.user.actor)
        if self.DeleteOutputSerializer is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(self.DeleteOutputSerializer(counts).data)


# PATCH: the row as GET finds it (a 404 before any 400), the view's own `InputSerializer`,
# then `update_service(<entity>=row, actor=..., **fields)`, whose returned row is the body.
class RetrieveUpdateDestroyApi(RetrieveDestroyApi):
    update_service: Callable | None = None
    InputSerializer: type[serializers.Serializer] | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.OutputSerializer is not None and cls.InputSerializer is not None:
            _document(cls, patch=extend_schema(request=cls.InputSerializer, responses=cls.OutputSerializer))

    def patch(self, request, **kwargs):
        instance = self.get_object(request, **kwargs)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        instance = type(self).update_service(
            **{_entity(kwargs): instance}, actor=request.user.actor, **serializer.validated_data
        )
        return Response(self.OutputSerializer(instance).data)


# POST {"ids": [...]}: one `service(principal=..., ids=...)` call, which decides all-or-none
# (404) or reports what it did not find; its counts are the body.
class BatchDeleteApi(APIView):
    InputSerializer = BatchDeleteInputSerializer

    service: Callable | None = None
    OutputSerializer: type[serializers.Serializer] | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.OutputSerializer is not None:
            _document(
                cls, post=extend_schema(request=cls.InputSerializer, responses={200: cls.OutputSerializer})
            )

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        counts = type(self).service(principal=request.user, ids=serializer.validated_data["ids"])
        return Response(self.OutputSerializer(counts).data)
