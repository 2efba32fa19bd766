import uritemplate
from drf_spectacular import openapi
from drf_spectacular.drainage import warn
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
BODY_METHODS = ("POST", "PUT", "PATCH")


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable and machine-readable: invalid, not_found, conflict, ...")
    message = serializers.CharField(help_text="For people; may change between versions.")
    fields = serializers.DictField(
        help_text="Invalid input: the messages per field (a list of strings, or the same shape "
        "nested for nested fields). Empty for every other error."
    )
    request_id = serializers.CharField(
        required=False, help_text="Unexpected errors only: the id under which the server logged it."
    )


class ErrorSerializer(serializers.Serializer):
    """Every error the API answers has this body."""

    error = ErrorDetailSerializer()


# Why each error status can answer an operation; `_error_statuses` picks the ones that apply.
ERROR_DESCRIPTIONS = {
    400: "Invalid input: malformed JSON, unknown fields, wrong types or values out of range (`fields` "
    "names them), or a character the API refuses in the URL.",
    401: "The API key is missing, malformed, revoked or expired.",
    403: "The key may not do this: a read-only key writing, or an agent-bound key acting on the "
    "whole workspace.",
    404: "A row named in the path, the query or the body does not exist or is not visible to the key "
    "(both answer the same).",
    409: "The write conflicts with the stored state (a name or identity already taken, an episode "
    "already closed, a superseded fact).",
    413: "The request body is larger than the configured limit.",
    415: "The request body is not JSON.",
    429: "The key's request budget is spent; retry after `Retry-After` seconds.",
}


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "core.authentication.ApiKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key: `mem_<prefix>_<secret>`."}


class AutoSchema(openapi.AutoSchema):
    """Names nested serializers after their view: `AgentListApi.InputSerializer` -> `AgentListInput`.

    The house style nests `InputSerializer`/`OutputSerializer` in every APIView; without this,
    every view's input would collide on the component name "Input".
    """

    def get_serializer_name(self, serializer, direction):
        qualname = type(serializer).__qualname__
        if "." not in qualname:
            return super().get_serializer_name(serializer, direction)
        outer, inner = qualname.rsplit(".", 1)
        outer = outer.split(".")[-1].removesuffix("Api")
        return outer + inner.removesuffix("Serializer")

    def _map_serializer(self, serializer, direction, bypass_extensions=False):
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        # StrictSerializer answers 400 for a field it does not declare; say so, or clients
        # (and generated tests) would take extra fields for allowed.
        from core.serializers import StrictSerializer

        strict = isinstance(force_instance(serializer), StrictSerializer)
        if direction == "request" and strict and "properties" in schema:
            schema["additionalProperties"] = False
        return schema

    def _get_paginator(self):
        # drf-spectacular asks only for list responses. Every list this API answers is either
        # paged (the view declares `pagination_class`, which `core.pagination.paginate` uses)
        # or wrapped in an object; a bare array would be documented wrongly, so it warns
        # (and `spectacular --fail-on-warn` fails).
        paginator = super()._get_paginator()
        if paginator is None:
            warn(
                f"{type(self.view).__name__}.{self.method.lower()} documents a bare list: declare "
                "`pagination_class` and page it with core.pagination.paginate, or wrap it in an object."
            )
        return paginator

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for status_code in self._error_statuses():
            response = OpenApiResponse(response=ErrorSerializer, description=ERROR_DESCRIPTIONS[status_code])
            responses.setdefault(
                str(status_code), self._get_response_for_code(response, str(status_code), direction=direction)
            )
        return dict(sorted(responses.items()))

    def _error_statuses(self) -> list[int]:
        """The error statuses this operation can answer (each with the `Error` body)."""
        method = self.method.upper()
        has_body = method in BODY_METHODS and self.get_request_serializer() is not None
        # 400 everywhere: the request guard refuses NUL in any URL before a view runs.
        statuses = [400, 401, 429]
        if method in UNSAFE_METHODS:
            statuses.append(403)
        if uritemplate.variables(self.path) or has_body or self.get_override_parameters():
            statuses.append(404)
        if method in BODY_METHODS:
            statuses.append(409)
        if has_body:
            statuses += [413, 415]
        return sorted(statuses)
