import functools

import uritemplate
from django.conf import settings
from django.urls import URLPattern, URLResolver, get_resolver
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
    "already closed, a superseded fact, a person under a legal hold, a run already running).",
    413: "The request body is larger than the configured limit.",
    415: "The request body is not JSON.",
    429: "The key's request budget is spent; retry after `Retry-After` seconds.",
}


# The tag of each operation, by its route: "namespace:name" first, then the namespace (the
# `app_name` of the app's urls.py), then the app label of the view's module. A new route of an
# app gets its tier's tag with nobody remembering; an app missing here warns, and the schema
# check (`spectacular --fail-on-warn`) fails. The tags themselves, in the order a user meets
# them and each with its description, are SPECTACULAR_SETTINGS["TAGS"].
TAG_BY_ROUTE = {
    "agents": "Agents & keys",
    "identities": "Identities",
    "runtime:identify": "Identities",
    "threads": "Threads & messages",
    "runtime": "Context & recall",
    "facts": "Facts",
    "episodic_entries": "Episodic memory",
    "episodic": "Episodic memory",
    "episodes": "Episodes",
    "facts:episode-extract-facts": "Episodes",
    "procedures": "Procedures",
    "checkpoints": "Checkpoints & runs",
    # A run's state lives under its thread's URL but is read and written by the agent loop.
    "threads:plan": "Checkpoints & runs",
    "threads:plan-versions": "Checkpoints & runs",
    "threads:run-snapshot": "Checkpoints & runs",
    "threads:iterations": "Checkpoints & runs",
    "store": "Long-term store",
    "webhooks": "Webhooks",
    "reflection": "Reflection",
    "review": "Review queue",
    "portability": "Export & import",
    "retention": "Retention",
    "provenance": "Provenance",
}


@functools.cache
def _route_names() -> dict[type, str]:
    """Each API view class -> "namespace:name" of its route (the `api:` prefix dropped)."""
    names = {}

    def walk(patterns, namespaces):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = [*namespaces, pattern.namespace] if pattern.namespace else namespaces
                walk(pattern.url_patterns, inner)
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
                if view is not None and pattern.name:
                    scoped = [ns for ns in namespaces if ns != "api"]
                    names.setdefault(view, ":".join([*scoped, pattern.name]))

    walk(get_resolver().url_patterns, [])
    return names


def route_tag(view_class: type) -> str | None:
    """The tag of a view's operations (TAG_BY_ROUTE), or None when nothing maps it."""
    route = _route_names().get(view_class, "")
    namespace = route.rpartition(":")[0]
    app_label = view_class.__module__.split(".")[0]
    for candidate in (route, namespace, app_label):
        if candidate and candidate in TAG_BY_ROUTE:
            return TAG_BY_ROUTE[candidate]
    return None


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

        instance = force_instance(serializer)
        strict = isinstance(instance, StrictSerializer)
        if direction == "request" and strict and "properties" in schema:
            schema["additionalProperties"] = False
        # Fields of which at least one set is needed (a procedure's `name`, or the `parent` it
        # takes the name from): the server refuses a body without any, and the schema says so.
        # drf-spectacular falls back to a base class's docstring: StrictSerializer's own
        # (how it refuses unknown fields) would describe every request body. Only a
        # serializer's own docstring describes it.
        if "description" in schema and not type(instance).__dict__.get("__doc__"):
            del schema["description"]
        any_of = getattr(instance, "required_any_of", ())
        if direction == "request" and any_of:
            schema["anyOf"] = [{"required": list(fields)} for fields in any_of]
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        # `allow_empty=False` refuses [] with a 400; drf-spectacular documents only min_length.
        empty_refused = isinstance(field, serializers.ListField | serializers.ListSerializer) and not getattr(
            field, "allow_empty", True
        )
        if direction == "request" and empty_refused and schema.get("type") == "array":
            schema["minItems"] = max(schema.get("minItems", 0), 1)
        return schema

    def get_tags(self):
        tag = route_tag(type(self.view))
        known = {entry["name"] for entry in settings.SPECTACULAR_SETTINGS.get("TAGS", [])}
        if tag is None or tag not in known:
            warn(
                f"{type(self.view).__name__} has no tag: map its URL namespace or app in "
                "core.schema.TAG_BY_ROUTE to one of SPECTACULAR_SETTINGS['TAGS']."
            )
            return super().get_tags()
        return [tag]

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
        # A delete conflicts too: erasing a person under a legal hold.
        if method in UNSAFE_METHODS:
            statuses.append(409)
        if has_body:
            statuses += [413, 415]
        return sorted(statuses)
