"""Request schemas say what the server accepts (issue 18, item 4).

For every operation that takes a body: the documented minimal body (only the required fields,
or the first set of an `anyOf` of required fields) is accepted, and leaving out any one of
those fields is a 400. A field documented optional that the server requires, or documented
required that it does without, fails here with the operation named.

Values come from the route table's valid body (core/tests/reliability/routes.py) where it has
the field, else are generated from the field's schema. Requests go with agent a1's key, so the
acting agent is implied, or with the workspace key for workspace-level acts; each runs in a
savepoint that is rolled back, so every operation starts from the same seeded rows.
"""

import re
import uuid

from django.test import TestCase
from django.urls import reverse
from django.utils import timezone

from core.tests.apis.test_openapi import openapi_document
from core.tests.reliability.routes import (
    API_CASES,
    api_request,
    isolated,
    quiet_request_log,
    response_json,
    routes,
    seed_world,
)

BODY_METHODS = ("post", "put", "patch")


def documented_path(route: str) -> str:
    """`api/v1/threads/<uuid:thread_id>/` -> `/api/v1/threads/{thread_id}/`."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


class Schemas:
    def __init__(self, document: dict):
        self.components = document["components"]["schemas"]

    def resolve(self, schema: dict) -> dict:
        while "$ref" in schema:
            schema = self.components[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def required(self, schema: dict) -> list[str]:
        """The fields a minimal body sends: `required`, plus the first set of an `anyOf`."""
        schema = self.resolve(schema)
        alternatives = [branch["required"] for branch in schema.get("anyOf", []) if "required" in branch]
        return [*schema.get("required", []), *(alternatives[0] if alternatives else [])]

    def minimal(self, schema: dict, valid):
        """The smallest value of `schema`, taking values from `valid` where it has them."""
        schema = self.resolve(schema)
        if "oneOf" in schema:
            # A field of several shapes: the one the valid value has, else the first.
            keys = set(valid) if isinstance(valid, dict) else set()
            fits = [b for b in schema["oneOf"] if set(self.required(b)) <= keys] or schema["oneOf"]
            return self.minimal(fits[0], valid)
        kind = schema.get("type", "object" if "properties" in schema else None)
        if kind == "object":
            valid = valid if isinstance(valid, dict) else {}
            body = {}
            for name in self.required(schema):
                field = schema.get("properties", {}).get(name, {})
                body[name] = self.minimal(field, valid[name]) if name in valid else self.generate(field)
            return body
        if kind == "array":
            items = schema.get("items", {})
            count = schema.get("minItems", 0)
            if isinstance(valid, list) and valid:
                return [self.minimal(items, item) for item in valid[: max(count, 1)]]
            return [self.generate(items) for _ in range(count)]
        if "enum" in schema and valid not in schema["enum"]:
            return self.generate(schema)  # The valid body is of another shape (a oneOf branch).
        return valid

    def generate(self, schema: dict):
        schema = self.resolve(schema)
        if "enum" in schema:
            return schema["enum"][0]
        kind = schema.get("type")
        if kind == "string":
            if schema.get("format") == "uuid":
                return str(uuid.uuid4())
            if schema.get("format") == "date-time":
                return timezone.now().isoformat()
            return "x" * max(schema.get("minLength", 1), 1)
        if kind == "integer":
            return schema.get("minimum", 1)
        if kind == "number":
            return schema.get("minimum", 0.5)
        if kind == "boolean":
            return True
        if kind == "array":
            return [self.generate(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
        return self.minimal(schema, {})


class DocumentedRequestBodiesTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.document = openapi_document()
        cls.schemas = Schemas(cls.document)

    def operations(self):
        """(label, URL, method, body schema, valid body, key) of every operation with a body."""
        w = self.world
        for route in routes(("api/v1/",)):
            case = API_CASES.get(route.name)
            if case is None:
                continue  # test_every_route_has_a_case fails for it.
            item = self.document["paths"].get(documented_path(route.route), {})
            for method in BODY_METHODS:
                body = item.get(method, {}).get("requestBody")
                if body is None:
                    continue
                schema = body["content"]["application/json"]["schema"]
                valid = case.bodies[method](w) if method in case.bodies else {}
                key = w.keys["owner"] if method in case.workspace_level else w.keys["a1"]
                url = reverse(route.name, kwargs=case.path(w))
                yield f"{method.upper()} {route.name}", url, method, schema, valid, key

    def send(self, method, url, body, key):
        def call():
            response = api_request(method, url, body=body, key=key)
            return response.status_code, response_json(response)

        with quiet_request_log():
            return isolated(call)

    def bodies(self, schema, valid) -> list[tuple[dict, list[str]]]:
        """The minimal body of each shape the operation accepts, with its required fields."""
        resolved = self.schemas.resolve(schema)
        branches = resolved.get("oneOf", [schema])
        found = []
        for branch in branches:
            branch = self.schemas.resolve(branch)
            if branch.get("type") == "array":
                found.append((self.schemas.minimal(branch, [valid]), []))
            else:
                found.append((self.schemas.minimal(branch, valid), self.schemas.required(branch)))
        return found

    def test_the_documented_minimal_body_is_accepted(self):
        refused, checked = [], 0
        for label, url, method, schema, valid, key in self.operations():
            for body, _ in self.bodies(schema, valid):
                checked += 1
                status, answer = self.send(method, url, body, key)
                if status == 400:
                    refused.append(f"{label} {body}: {answer}")
        assert not refused, "\n".join(refused)
        assert checked > 40, checked

    def test_leaving_out_a_required_field_is_a_400(self):
        accepted, checked = [], 0
        for label, url, method, schema, valid, key in self.operations():
            for body, required in self.bodies(schema, valid):
                for name in required:
                    checked += 1
                    status, _ = self.send(method, url, {k: v for k, v in body.items() if k != name}, key)
                    if status != 400:
                        accepted.append(f"{label} without {name}: {status}")
        assert not accepted, "\n".join(accepted)
        assert checked > 30, checked
