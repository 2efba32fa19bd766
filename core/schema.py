from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension


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
