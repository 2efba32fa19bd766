"""The API reference reads like the product (issue 18, item 4).

Every operation sits under one tier's tag (given centrally by core.schema.TAG_BY_ROUTE, so a new
route needs nobody to remember), has a one-line summary, and shows an example response, plus an
example request where it takes a body. Every example validates against its operation's schema:
a reader who copies one gets a request the schema accepts and sees an answer it documents.
"""

import copy

import jsonschema
from django.conf import settings

from core.schema import TAG_BY_ROUTE
from core.testing import MemoryTestCase
from core.tests.apis.test_openapi import openapi_document, operations

# A summary is one line in the operation list, not a paragraph.
SUMMARY_MAX_CHARS = 80


def json_schema(schema: dict, components: dict) -> dict:
    """An OpenAPI 3.0 schema as JSON Schema (2020-12): `nullable` becomes a null type, and the
    document's components travel along for `$ref`."""

    def convert(node):
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = {key: convert(value) for key, value in node.items()}
        if node.pop("nullable", False):
            if "type" in node:
                node["type"] = [node["type"], "null"]
                if "enum" in node:
                    node["enum"] = [*node["enum"], None]
            else:
                node = {"anyOf": [node, {"type": "null"}]}
        return node

    return {**convert(copy.deepcopy(schema)), "components": {"schemas": convert(components)}}


def validate(value, schema: dict, components: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(
        json_schema(schema, components), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(value)
    ]


def request_examples(operation: dict) -> dict:
    content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    return content.get("examples", {})


def response_examples(operation: dict) -> dict:
    """{(status, name): (example value, schema)} of the operation's JSON responses."""
    found = {}
    for status, response in operation["responses"].items():
        # JSON, or another type an operation streams (the export's JSON lines): its example is
        # text, checked against its schema as JSON ones are.
        contents = response.get("content", {})
        content = contents.get("application/json") or next(iter(contents.values()), None)
        for name, example in (content or {}).get("examples", {}).items():
            found[(status, name)] = example["value"], content["schema"]
    return found


def success_has_body(operation: dict) -> bool:
    return any(
        status.startswith("2") and response.get("content")
        for status, response in operation["responses"].items()
    )


class ApiReferenceTests(MemoryTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.document = openapi_document()
        cls.components = cls.document["components"]["schemas"]

    def test_every_tag_has_a_description_and_every_mapped_tag_exists(self):
        tags = settings.SPECTACULAR_SETTINGS["TAGS"]
        names = [tag["name"] for tag in tags]
        assert len(names) == len(set(names)), names
        for tag in tags:
            assert len(tag.get("description", "")) > 80, tag["name"]
        assert set(TAG_BY_ROUTE.values()) <= set(names)
        assert self.document["tags"] == tags

    def test_every_operation_has_one_known_tag(self):
        known = {tag["name"] for tag in settings.SPECTACULAR_SETTINGS["TAGS"]}
        untagged = [
            (method, path, operation.get("tags"))
            for path, method, operation in operations(self.document)
            if len(operation.get("tags", [])) != 1 or operation["tags"][0] not in known
        ]
        assert not untagged, untagged

    def test_operations_sit_under_their_tier(self):
        tag_of = {
            (method, path): operation["tags"][0] for path, method, operation in operations(self.document)
        }
        assert tag_of["post", "/api/v1/agents/"] == "Agents & keys"
        assert tag_of["post", "/api/v1/memory-users/identify/"] == "Identities"
        assert tag_of["post", "/api/v1/threads/{thread_id}/messages/"] == "Threads & messages"
        assert tag_of["put", "/api/v1/threads/{thread_id}/plan/"] == "Checkpoints & runs"
        assert tag_of["put", "/api/v1/threads/{thread_id}/checkpoints/"] == "Checkpoints & runs"
        assert tag_of["post", "/api/v1/context/"] == "Context & recall"
        assert tag_of["post", "/api/v1/episodic-entries/search/"] == "Episodic memory"
        assert tag_of["post", "/api/v1/facts/remember/"] == "Facts"
        assert tag_of["post", "/api/v1/procedures/match/"] == "Procedures"
        assert tag_of["post", "/api/v1/episodes/{episode_id}/close/"] == "Episodes"

    def test_every_operation_has_a_one_line_summary(self):
        missing = [
            (method.upper(), path)
            for path, method, operation in operations(self.document)
            if not operation.get("summary")
            or "\n" in operation["summary"]
            or len(operation["summary"]) > SUMMARY_MAX_CHARS
        ]
        assert not missing, f"{len(missing)} operations without a one-line summary: {missing}"

    def test_every_operation_shows_an_example_request_and_response(self):
        missing = []
        for path, method, operation in operations(self.document):
            if "requestBody" in operation and not request_examples(operation):
                missing.append((method.upper(), path, "request"))
            if success_has_body(operation) and not any(
                status.startswith("2") for status, _ in response_examples(operation)
            ):
                missing.append((method.upper(), path, "response"))
        assert not missing, f"{len(missing)} examples missing: {missing}"

    def test_every_example_validates_against_its_operation_schema(self):
        problems, checked = [], 0
        for path, method, operation in operations(self.document):
            if request_examples(operation):
                schema = operation["requestBody"]["content"]["application/json"]["schema"]
                for name, example in request_examples(operation).items():
                    checked += 1
                    for error in validate(example["value"], schema, self.components):
                        problems.append(f"{method.upper()} {path} request {name}: {error}")
            for (status, name), (value, schema) in response_examples(operation).items():
                checked += 1
                for error in validate(value, schema, self.components):
                    problems.append(f"{method.upper()} {path} {status} {name}: {error}")
        assert not problems, "\n".join(problems)
        assert checked > 100, checked

    def test_the_validator_refuses_an_example_the_schema_does_not_allow(self):
        """The check above is only as good as the validator: nullable, $ref and formats count."""
        schema = {"$ref": "#/components/schemas/MemoryUserOutput"}
        wrong_type = {"id": "not-a-uuid", "canonical_id": 1}
        errors = validate(wrong_type, schema, self.components)
        assert any(error.startswith("id:") for error in errors), errors
        assert any(error.startswith("canonical_id:") for error in errors), errors
        assert any("required" in error for error in errors), errors
        assert validate(None, {"type": "string", "nullable": True}, {}) == []
        assert validate(None, {"type": "string"}, {}) != []

    def test_a_component_is_described_by_its_own_docstring_only(self):
        """drf-spectacular falls back to a base's docstring: StrictSerializer's described 50 bodies."""
        from core.serializers import StrictSerializer

        inherited = StrictSerializer.__doc__.strip().splitlines()[0]
        described = [
            name
            for name, component in self.components.items()
            if inherited in component.get("description", "")
        ]
        assert not described, described
        message = self.components["MessageInputRequest"]["description"]
        assert message.startswith("One message to append."), message
