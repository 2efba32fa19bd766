"""The OpenAPI document is part of the contract (issue 11, finding 6).

Lists are documented as the page envelope they answer, every error as the one error body,
and real responses validate against the document with the same validator the contract run
(core/tests/reliability/test_contract.py) uses, here in-process and fast.
"""

import json
import tempfile

import schemathesis
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from werkzeug.test import Client

from core.pagination import PAGINATION_CLASS_REQUIRED, LimitOffsetPagination, paginate
from core.testing import MemoryTestCase

ERROR = {"$ref": "#/components/schemas/Error"}
PAGE_FIELDS = ["count", "limit", "offset", "next", "previous", "results"]


def openapi_document() -> dict:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema, renderer_context={}))


def operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def success_schema(operation: dict) -> dict | None:
    for code in ("200", "201"):
        content = operation["responses"].get(code, {}).get("content")
        # A body that is not JSON (the export's JSON lines) is neither a list nor a page.
        if content and "application/json" in content:
            return content["application/json"]["schema"]
    return None


class OpenApiDocumentTests(MemoryTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.document = openapi_document()

    def test_schema_is_valid_and_generates_without_a_warning(self):
        """A warning (a list that is neither paged nor wrapped, an unresolvable field) fails."""
        with tempfile.TemporaryDirectory() as directory:
            call_command("spectacular", "--validate", "--fail-on-warn", "--file", f"{directory}/schema.yaml")

    def test_every_paged_list_is_documented_as_the_page_envelope_with_its_parameters(self):
        paged = []
        for path, method, operation in operations(self.document):
            names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            schema = success_schema(operation)
            if {"limit", "offset"} <= names:
                paged.append(path)
                component = schema["$ref"].rsplit("/", 1)[-1]
                assert component.startswith("Paginated"), (method, path, schema)
                page = self.document["components"]["schemas"][component]
                assert sorted(page["required"]) == sorted(PAGE_FIELDS)
                assert page["properties"]["results"]["type"] == "array"
                assert page["properties"]["next"]["nullable"] is True
        assert "/api/v1/facts/" in paged
        assert "/api/v1/threads/{thread_id}/messages/" in paged
        assert "/api/v1/store/items/" in paged
        assert "/api/v1/webhooks/{subscription_id}/deliveries/" in paged
        assert "/api/v1/threads/{thread_id}/transfers/" in paged
        assert "/api/v1/review/" in paged
        assert len(paged) == 20

    def test_no_operation_answers_a_bare_array_except_the_tool_schemas(self):
        bare = [
            (method, path)
            for path, method, operation in operations(self.document)
            if (success_schema(operation) or {}).get("type") == "array"
        ]
        assert bare == [("get", "/api/v1/tools/")]

    def test_every_operation_documents_its_errors_with_the_error_body(self):
        error = self.document["components"]["schemas"]["Error"]
        assert error["required"] == ["error"]
        detail = self.document["components"]["schemas"]["ErrorDetail"]
        assert sorted(detail["required"]) == ["code", "fields", "message"]
        for path, method, operation in operations(self.document):
            responses = operation["responses"]
            for code in ("400", "401", "429"):
                assert responses[code]["content"]["application/json"]["schema"] == ERROR, (method, path, code)
            if method in ("post", "put", "patch", "delete"):
                assert "403" in responses, (method, path)
            if "{" in path:
                assert "404" in responses, (method, path)

    def test_request_bodies_forbid_the_fields_the_api_refuses(self):
        """StrictSerializer answers 400 for an undeclared field; the document says so."""
        schemas = self.document["components"]["schemas"]
        for path, method, operation in operations(self.document):
            if "requestBody" not in operation:
                continue
            name = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[
                -1
            ]
            # A body of several shapes (one message, the envelope, a list) forbids them in each.
            branches = schemas[name].get("oneOf", [{"$ref": f"#/components/schemas/{name}"}])
            for branch in branches:
                branch = branch.get("items", branch)
                branch_name = branch["$ref"].rsplit("/", 1)[-1]
                assert schemas[branch_name]["additionalProperties"] is False, (method, path, branch_name)

    def test_message_append_documents_one_message_the_envelope_and_a_bare_list(self):
        """Before, only the envelope was documented, with messages as free-form objects."""
        operation = self.document["paths"]["/api/v1/threads/{thread_id}/messages/"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        schemas = self.document["components"]["schemas"]
        message = {"$ref": "#/components/schemas/MessageInputRequest"}
        assert schemas[body["$ref"].rsplit("/", 1)[-1]]["oneOf"] == [
            message,
            {"$ref": "#/components/schemas/MessageListInputRequest"},
            {"type": "array", "items": message},
        ]
        assert schemas["MessageListInputRequest"]["properties"]["messages"]["items"] == message
        assert schemas["MessageInputRequest"]["required"] == ["role"]
        assert {"201", "200"} <= set(operation["responses"])

    def test_each_operation_lists_the_api_key_scheme_once(self):
        for path, method, operation in operations(self.document):
            assert operation["security"] == [{"ApiKeyAuth": []}], (method, path)


class PaginateTests(MemoryTestCase):
    def test_a_view_without_pagination_class_cannot_page(self):
        """paginate() pages with the view's own pagination_class, the attribute the schema reads."""

        class Undeclared:
            pass

        message = PAGINATION_CLASS_REQUIRED.format(view="Undeclared")
        with self.assertRaisesMessage(ImproperlyConfigured, message):
            paginate(queryset=[], serializer_class=None, request=None, view=Undeclared())

    def test_the_view_pagination_class_is_the_one_used(self):
        class Declared:
            pagination_class = LimitOffsetPagination

        request = self.api().get("/api/v1/agents/?limit=1").wsgi_request
        from rest_framework.request import Request

        from core.apis import AgentOutputSerializer

        response = paginate(
            queryset=self.workspace.agents.order_by("slug"),
            serializer_class=AgentOutputSerializer,
            request=Request(request),
            view=Declared(),
        )
        assert list(response.data) == PAGE_FIELDS
        assert response.data["count"] == 2
        assert len(response.data["results"]) == 1


class ResponsesMatchTheSchemaTests(MemoryTestCase):
    """Responses of the shapes the contract run found wrong, validated against the document."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.schema = schemathesis.openapi.from_dict(openapi_document())

    def setUp(self):
        # As Django's test client does: the request must not close the test's transaction.
        for signal in (request_started, request_finished):
            signal.disconnect(close_old_connections)
            self.addCleanup(signal.connect, close_old_connections)
        self.http = Client(WSGIHandler())

    def call(self, method, path, template=None, body=None, key=None, expect=200):
        headers = {} if key == "" else {"Authorization": f"Bearer {key or self.owner_key}"}
        response = self.http.open(path, method=method.upper(), json=body, headers=headers)
        assert response.status_code == expect, (path, response.status_code, response.get_data()[:500])
        # Raises with every mismatch when the body differs from the documented one.
        self.schema[template or path][method.upper()].validate_response(response)
        return response.get_json()

    def remember(self, key, value, **extra):
        body = {"agent": "assistant", "key": key, "value": value, "scope": "agent", **extra}
        return self.call("post", "/api/v1/facts/remember/", body=body, expect=201)["fact"]

    def test_lists_answer_the_documented_page(self):
        self.remember("city", "Lisbon")
        for path in ("/api/v1/agents/", "/api/v1/facts/", "/api/v1/procedures/", "/api/v1/threads/"):
            page = self.call("get", f"{path}?limit=1", template=path)
            assert list(page) == PAGE_FIELDS

    def test_procedure_match_answers_the_documented_results_object(self):
        self.call(
            "post",
            "/api/v1/procedures/",
            body={
                "agent": "assistant",
                "name": "Refunds",
                "procedure_type": "prompt_template",
                "content": {"template": "Check the order first."},
                "trigger_conditions": {"goal_contains": ["refund"]},
            },
            expect=201,
        )
        body = self.call(
            "post", "/api/v1/procedures/match/", body={"goal": "a refund please", "agent": "assistant"}
        )
        assert [m["procedure"]["name"] for m in body["results"]] == ["Refunds"]
        # Not found semantically: the documented nullable similarity is null.
        assert body["results"][0]["procedure"]["similarity"] is None

    def test_recall_documents_its_facts_procedures_and_episodes(self):
        self.remember("city", "Lisbon")
        body = self.call("post", "/api/v1/recall/", body={"agent": "assistant"})
        assert body["facts"][0]["similarity"] is None

    def test_context_without_a_thread_answers_the_documented_history(self):
        body = self.call("post", "/api/v1/context/", body={"agent": "assistant", "message": "hello"})
        assert body["history"]["summary_in_session_memory"] is False
        body = self.call(
            "post",
            "/api/v1/context/",
            body={"agent": "assistant", "channel": "telegram", "external_id": "42", "message": "hi"},
        )
        assert body["memory_user"]["canonical_id"]

    def test_deletes_answer_the_documented_counts(self):
        fact = self.remember("city", "Lisbon")
        body = self.call("delete", f"/api/v1/facts/{fact['id']}/", template="/api/v1/facts/{fact_id}/")
        assert body == {"facts": 1}
        other = self.remember("country", "Portugal")
        body = self.call("post", "/api/v1/facts/batch-delete/", body={"ids": [other["id"]]})
        assert body == {"facts": 1}
        person = self.call("post", "/api/v1/memory-users/", body={"canonical_id": "telegram:1"}, expect=201)
        body = self.call(
            "delete",
            f"/api/v1/memory-users/{person['id']}/",
            template="/api/v1/memory-users/{memory_user_id}/",
        )
        assert body["memory_users"] == 1

    def test_errors_answer_the_documented_error_body(self):
        path, template = "/api/v1/facts/00000000-0000-0000-0000-000000000000/", "/api/v1/facts/{fact_id}/"
        missing = self.call("get", path, template=template, expect=404)
        assert missing["error"]["code"] == "not_found"
        anonymous = self.call("get", path, template=template, key="", expect=401)
        assert anonymous["error"]["code"] == "not_authenticated"
        invalid = self.call("post", "/api/v1/facts/remember/", body={"key": 1}, expect=400)
        assert invalid["error"]["fields"]
