"""Hostile-input corpus (issue 11): every API write body, field by field, and every query and
path parameter, against NUL, lone surrogates, deep nesting, overflowing numbers, over-long,
SQL- and template-like strings and wrong types.

Never a 5xx; every 4xx has the documented error body and stores nothing. NUL, lone
surrogates, 10,000-deep nesting and NaN/Infinity are refused (4xx) wherever they appear;
a top-level field given the wrong JSON type is a 400. Each request runs in a savepoint that
is rolled back, so every mutation starts from the same valid body and seeded rows.
"""

import io
import json
from urllib.parse import quote, urlencode

import django_filters
import pytest
from django.db import DatabaseError
from django.test import Client, TestCase, override_settings
from django.test.client import ClientHandler, RequestFactory
from django.urls import reverse

from core.tests.reliability.routes import (
    API_CASES,
    error_shape_problem,
    isolated,
    quiet_request_log,
    routes,
    seed_world,
    snapshot,
    snapshot_diff,
)

pytestmark = pytest.mark.reliability

DEEP = 10_000


# name -> (JSON text, must be refused wherever it appears)
VALUES = {
    "nul": (json.dumps("a\x00b"), True),
    "nul_key": (json.dumps({"a\x00": 1}), True),
    "lone_surrogate": (json.dumps("\ud800"), True),
    "deep_list": ("[" * DEEP + "]" * DEEP, True),
    "nan": ("NaN", True),
    "1e20": ("1e20", False),
    "-1e20": ("-1e20", False),
    "2**63": (str(2**63), False),
    "long_300": (json.dumps("x" * 300), False),
    "long_10000": (json.dumps("x" * 10_000), False),
    "sql": (json.dumps("' OR 1=1 --"), False),
    "template": (json.dumps("{{ 7*7 }}{% debug %}"), False),
    "int": ("1", False),
    "list": ("[]", False),
    "object": ("{}", False),
    # JSON text inside a string: stored as text, but a member a service reads as JSON (a tool
    # call's `arguments`, an object argument sent as text) must refuse it, not fail.
    "json_text_deep": (json.dumps("[" * DEEP + "]" * DEEP), False),
    "json_text_nul": (json.dumps(json.dumps({"a": "a\x00b"})), False),
}
# Members inside objects and lists get the values most likely to break a column or a parser;
# the full set on every nested member would triple the run for little.
NESTED_VALUES = ("nul", "lone_surrogate", "2**63", "long_10000", "int", "object", "json_text_deep")
JSON_TYPE = {"int": int, "list": list, "object": dict}

# Whole bodies, valid or not as JSON.
BODIES = {
    "empty": b"",
    "not_json": b"{not json",
    "truncated": b'{"a": ',
    "list": b"[]",
    "string": b'"text"',
    "null": b"null",
    "deep_list": b"[" * DEEP + b"]" * DEEP,
    "deep_object": b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "nan": b"NaN",
    "latin1": '{"a": "caf\xe9"}'.encode("latin-1"),
}

# Query strings and path segments: percent-encoded text as it arrives on the wire.
QUERY_VALUES = {
    "nul": "a%00b",
    "lone_surrogate": "%ED%A0%80",
    "long_10000": "x" * 10_000,
    "sql": quote("' OR 1=1 --"),
    "template": quote("{{ 7*7 }}"),
    "1e20": "1e20",
    "2**63": str(2**63),
    "nan": "NaN",
    "object": quote('{"a": 1}'),
}
BROWSER_QUERY_VALUES = ("nul", "lone_surrogate", "sql", "2**63")
PAGINATION = ("limit", "offset")


def leaf_paths(value, prefix=(), depth=3):
    """Paths to every member of a body, down to `depth` levels (lists: their first item)."""
    if depth == 0:
        return
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and value:
        items = [(0, value[0])]
    else:
        return
    for key, item in items:
        yield (*prefix, key)
        yield from leaf_paths(item, (*prefix, key), depth - 1)


MARK = "__HOSTILE_VALUE__"


def mutated(body, path, raw: str) -> bytes:
    """`body` with the member at `path` replaced by the JSON text `raw`."""
    copy = json.loads(json.dumps(body))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = MARK
    return json.dumps(copy).replace(json.dumps(MARK), raw).encode("utf-8", "surrogatepass")


def path_label(path) -> str:
    return ".".join(str(p) for p in path)


def query_parameters() -> dict:
    """{(schema path, method): [query parameter names]} from the OpenAPI document."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]
            found[(path, method)] = names
    return found


def body_properties() -> dict:
    """{(schema path, method): [top-level JSON body member names]} from the OpenAPI document."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema.get("components", {}).get("schemas", {})
    found = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {}).get("$ref", "")
            properties = components.get(ref.rsplit("/", 1)[-1], {}).get("properties", {}) if ref else {}
            found[(path, method)] = list(properties)
    return found


def documented_ranges(names) -> list[tuple[str, str]]:
    """The (lower, upper) bound pairs among a list's query parameters: `x_after` / `x_before`
    and `min_x` / `max_x`."""
    pairs = [(name, name.removesuffix("after") + "before") for name in names if name.endswith("_after")]
    pairs += [(name, "max_" + name.removeprefix("min_")) for name in names if name.startswith("min_")]
    return [(low, high) for low, high in pairs if high in names]


def schema_path(route: str) -> str:
    import re

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


class HostileInputTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()
        cls.baseline = snapshot(cls.world.w1)

    def _send(self, method, path, data: bytes, query: str = ""):
        client = Client(raise_request_exception=False)
        url = f"{path}?{query}" if query else path
        return client.generic(
            method.upper(),
            url,
            data=data,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.world.keys['owner']}",
        )

    def _check(self, method, path, data=b"", query="", *, must_refuse=False, api=True) -> str | None:
        """What is wrong with the answer to one hostile request, or None."""
        # Every request is rolled back, so the seeded rows are the baseline of each one.
        before = self.baseline

        def run():
            response = self._send(method, path, data, query) if api else self._browse(path, query)
            status = response.status_code
            if status >= 500:
                return f"{status}"
            if status < 400:
                return f"accepted ({status})" if must_refuse else None
            try:
                changed = snapshot_diff(before, snapshot(self.world.w1))
            except DatabaseError as exc:
                return f"{status} but the transaction was left aborted: {exc.__class__.__name__}"
            if changed:
                return f"{status} but stored: {changed[:3]}"
            return error_shape_problem(response) if api else None

        return isolated(run)

    def _browse(self, path, query):
        client = Client(raise_request_exception=False)
        client.force_login(self.world.operators["owner"])
        return client.get(f"{path}?{query}")

    def _write_operations(self):
        w = self.world
        for route in routes(("api/v1/",)):
            case = API_CASES[route.name]
            path = reverse(route.name, kwargs=case.path(w))
            for method in route.methods:
                if method in ("post", "put", "patch"):
                    yield route, case, method, path, case.bodies[method](w) if method in case.bodies else None

    def test_write_bodies(self):
        """Every member of every write body, replaced by each hostile value: no 5xx, nothing
        stored on refusal, refusals in the documented shape."""
        with quiet_request_log():
            for route, case, method, path, body in self._write_operations():
                if body is None:
                    continue
                for field_path in leaf_paths(body):
                    label = path_label(field_path)
                    with self.subTest(route=route.name, method=method, field=label):
                        problems = []
                        original = self._member(body, field_path)
                        names = VALUES if len(field_path) == 1 else NESTED_VALUES
                        for name in names:
                            raw, refuse = VALUES[name]
                            must_refuse = refuse or self._wrong_type(case, field_path, original, name)
                            problem = self._check(
                                method, path, mutated(body, field_path, raw), must_refuse=must_refuse
                            )
                            if problem:
                                problems.append(f"{name}: {problem}")
                        assert not problems, problems

    @staticmethod
    def _member(body, path):
        for key in path:
            body = body[key]
        return body

    @staticmethod
    def _wrong_type(case, path, original, name) -> bool:
        """A top-level field given another JSON type than its own (string, object, list) is a
        400, unless the field takes any JSON."""
        if len(path) != 1 or path[0] in case.free_json or name not in JSON_TYPE:
            return False
        given = JSON_TYPE[name]
        if isinstance(original, str):
            return given is not str
        if isinstance(original, dict):
            return given is list
        if isinstance(original, list):
            return given is dict
        return False

    def test_whole_bodies(self):
        """Bodies that are not a JSON object, or not JSON, and a key holding NUL: 4xx, never 5xx."""
        with quiet_request_log():
            for route, _case, method, path, body in self._write_operations():
                with self.subTest(route=route.name, method=method):
                    problems = []
                    for name, data in BODIES.items():
                        if name == "empty" and body is None:
                            continue  # an operation without a body accepts none
                        # An operation that reads no body only has to stay up.
                        refuse = name != "empty" and body is not None
                        problem = self._check(method, path, data, must_refuse=refuse)
                        if problem:
                            problems.append(f"{name}: {problem}")
                    if isinstance(body, dict):
                        data = json.dumps({**body, "ke\x00y": "v"}).encode()
                        problem = self._check(method, path, data, must_refuse=True)
                        if problem:
                            problems.append(f"nul in a key: {problem}")
                    assert not problems, problems

    def test_query_and_path_parameters(self):
        """Every query parameter the OpenAPI document lists (and limit/offset), and every free-text
        path segment, with each hostile value: no 5xx; refusals in the documented shape."""
        w = self.world
        parameters = query_parameters()
        with quiet_request_log():
            for route in routes(("api/v1/",)):
                case = API_CASES[route.name]
                kwargs = case.path(w)
                path = reverse(route.name, kwargs=kwargs)
                for method in route.methods:
                    body = case.bodies[method](w) if method in case.bodies else None
                    data = json.dumps(body).encode() if body is not None else b""
                    valid = case.query[method](w) if method in case.query else {}
                    names = list(parameters.get((schema_path(route.route), method), []))
                    if method == "get":
                        # What the view validates itself, should the document miss a parameter.
                        declared = getattr(route.view_class, "FilterSerializer", None)
                        extra = [*PAGINATION, *(declared().fields if declared else ())]
                        names += [p for p in extra if p not in names]
                    for name in names:
                        with self.subTest(route=route.name, method=method, query=name):
                            problems = []
                            base = urlencode({k: v for k, v in valid.items() if k != name})
                            for label, value in QUERY_VALUES.items():
                                query = f"{base}&{name}={value}" if base else f"{name}={value}"
                                problem = self._check(method, path, data, query)
                                if problem:
                                    problems.append(f"{label}: {problem}")
                            assert not problems, problems
                    for segment in ("run_id", "checkpoint_id", "slug"):
                        if segment not in kwargs:
                            continue
                        with self.subTest(route=route.name, method=method, path=segment):
                            problems = []
                            for label, value in QUERY_VALUES.items():
                                hostile = path.replace(quote(str(kwargs[segment])), value, 1)
                                problem = self._check(method, hostile, data, urlencode(valid))
                                if problem:
                                    problems.append(f"{label}: {problem}")
                            assert not problems, problems

    def test_empty_ranges(self):
        """A list filtered by a range that can hold nothing (`created_after` at or past
        `created_before`, `min_confidence` above `max_confidence`: any two bounds of one field)
        is a 400 naming the upper bound, not an empty page that reads as "no such memory"; a
        range that holds a value is answered."""
        w = self.world
        parameters = query_parameters()
        checked = []
        with quiet_request_log():
            for route in routes(("api/v1/",)):
                if "get" not in route.methods:
                    continue
                names = parameters.get((schema_path(route.route), "get"), [])
                case = API_CASES[route.name]
                path = reverse(route.name, kwargs=case.path(w))
                valid = case.query["get"](w) if "get" in case.query else {}
                for low, high in documented_ranges(names):
                    checked.append(f"{route.name}: {low}")
                    with self.subTest(route=route.name, range=low):
                        if low.startswith("min_"):  # Both bounds included: equal ends hold a value.
                            more, less = "0.9", "0.5"
                            empty, message = [(more, less)], f"{high} must be at least {low}."
                        else:  # From `low` up to, not including, `high`.
                            more, less = "2026-06-02T00:00:00Z", "2026-06-01T00:00:00Z"
                            empty, message = [(more, less), (more, more)], f"{high} must be later than {low}."
                        for start, end in empty:
                            query = urlencode({**valid, low: start, high: end})
                            response = self._send("get", path, b"", query)
                            assert response.status_code == 400, (query, response.content[:300])
                            assert response.json()["error"]["fields"] == {high: [message]}
                        query = urlencode({**valid, low: less, high: more})
                        assert self._send("get", path, b"", query).status_code == 200
        # The entries, threads (created and active), checkpoints, episodes, facts' confidence,
        # people, store items and webhook deliveries: a new list's range is checked unnamed.
        assert len(checked) >= 9, checked

    def test_empty_ranges_in_search_bodies(self):
        """The searches that take a time range in their body (episodic entries, episodes)
        refuse an empty one the same way, naming the upper bound."""
        w = self.world
        checked = []
        with quiet_request_log():
            for (path_template, method), names in body_properties().items():
                for low, high in documented_ranges(names):
                    route = next(r for r in routes(("api/v1/",)) if schema_path(r.route) == path_template)
                    case = API_CASES[route.name]
                    path = reverse(route.name, kwargs=case.path(w))
                    body = case.bodies[method](w)
                    checked.append(f"{route.name}: {low}")
                    message = f"{high} must be later than {low}."
                    with self.subTest(route=route.name, range=low):
                        for end in ("2026-06-01T00:00:00Z", "2026-06-02T00:00:00Z"):
                            data = json.dumps({**body, low: "2026-06-02T00:00:00Z", high: end}).encode()
                            response = self._send(method, path, data)
                            assert response.status_code == 400, response.content[:300]
                            assert response.json()["error"]["fields"] == {high: [message]}
                        data = json.dumps({**body, low: "2026-06-01T00:00:00Z", high: "2026-06-02T00:00:00Z"})
                        assert self._send(method, path, data.encode()).status_code == 200
        assert len(checked) >= 2, checked

    def test_empty_ranges_in_the_browser(self):
        """The /memories tabs and the audit trail share the FilterSets: the toolbar says which
        bound is wrong instead of showing an empty list."""
        from browser.lib.tabs import TabSpec
        from browser.selectors.audit import AuditEventFilter
        from browser.views import checkpoints, entries, episodes, facts, procedures, threads, users
        from core.filters import _filter_ranges

        workspace = {"workspace_id": self.world.w1.pk}
        pages = [
            (reverse(f"memories:{value.slug}", kwargs=workspace), value.filterset)
            for module in (checkpoints, entries, episodes, facts, procedures, threads, users)
            for value in vars(module).values()
            if isinstance(value, TabSpec)
        ]
        pages.append((reverse("memories:audit", kwargs=workspace), AuditEventFilter))
        checked = []
        for path, filterset in pages:
            for low, high, _ in _filter_ranges(filterset.base_filters):
                checked.append(f"{path}: {low}")
                with self.subTest(page=path, range=low):
                    if isinstance(filterset.base_filters[low], django_filters.NumberFilter):
                        start, end, message = "0.9", "0.5", f"{high} must be at least {low}."
                    else:
                        start, end = "2026-06-02T00:00", "2026-06-01T00:00"
                        message = f"{high} must be later than {low}."
                    response = self._browse(path, urlencode({low: start, high: end}))
                    assert response.status_code == 200
                    assert message in response.content.decode()
        assert len(checked) >= 7, checked

    def test_browser_filters(self):
        """The /memories tabs' filters (the API's FilterSets) never answer 5xx either."""
        from browser.lib.tabs import TabSpec
        from browser.views import checkpoints, entries, episodes, facts, procedures, threads, users

        specs = [
            value
            for module in (checkpoints, entries, episodes, facts, procedures, threads, users)
            for value in vars(module).values()
            if isinstance(value, TabSpec)
        ]
        assert len(specs) == 7
        with quiet_request_log():
            for spec in specs:
                path = reverse(f"memories:{spec.slug}", kwargs={"workspace_id": self.world.w1.pk})
                for name in [*spec.filterset.base_filters, "sort", "page", "per_page"]:
                    with self.subTest(tab=spec.slug, query=name):
                        problems = []
                        for label in BROWSER_QUERY_VALUES:
                            problem = self._check(
                                "get", path, query=f"{name}={QUERY_VALUES[label]}", api=False
                            )
                            if problem:
                                problems.append(f"{label}: {problem}")
                        assert not problems, problems

    def test_browser_search_and_audit_filters(self):
        """The header search (every tier's group and each tier's own list) and the audit trail's
        filters, page and CSV export never answer 5xx either, whatever the query string holds.
        The search gets full-text syntax too: websearch_to_tsquery and the tiers' substring
        filters see the same text."""
        from browser.selectors.audit import AuditEventFilter
        from browser.selectors.search import TIERS

        workspace = {"workspace_id": self.world.w1.pk}
        search = reverse("memories:search", kwargs=workspace)
        syntax = ['"', '"unclosed', "-", "!!", "a:*", "a & | b", "or or", "<->", "\\", "%_", "(", "'"]
        values = [QUERY_VALUES[label] for label in (*BROWSER_QUERY_VALUES, "long_10000", "template")]
        values += [quote(text) for text in syntax]
        queries = [f"q={value}" for value in values]
        queries += [f"q={value}&tier={tier.slug}" for value in values for tier in TIERS]
        queries += [
            f"q=Lisbon&{name}={QUERY_VALUES[label]}"
            for name in ("tier", "sort", "page", "per_page")
            for label in BROWSER_QUERY_VALUES
        ]
        audit_pages = [
            reverse("memories:audit", kwargs=workspace),
            reverse("memories:audit-export", kwargs=workspace),
        ]
        names = [*AuditEventFilter.base_filters, "sort", "page", "per_page"]
        with quiet_request_log():
            with self.subTest(page="search"):
                problems = [
                    f"{query[:80]}: {problem}"
                    for query in queries
                    if (problem := self._check("get", search, query=query, api=False))
                ]
                assert not problems, problems
            for path in audit_pages:
                for name in names:
                    with self.subTest(page=path, query=name):
                        problems = []
                        for label in BROWSER_QUERY_VALUES:
                            problem = self._check(
                                "get", path, query=f"{name}={QUERY_VALUES[label]}", api=False
                            )
                            if problem:
                                problems.append(f"{label}: {problem}")
                        assert not problems, problems


class BodySizeTests(TestCase):
    """The size limit holds with or without Content-Length. The chunked case goes through the
    WSGI handler as gunicorn calls it: no CONTENT_LENGTH, `Transfer-Encoding: chunked`, the
    decoded body on wsgi.input and `wsgi.input_terminated` set."""

    LIMIT = 4096

    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()

    def _body(self, size: int) -> bytes:
        return json.dumps(
            {"agent": "support-bot", "key": "essay", "value": "x" * size, "scope": "agent"}
        ).encode()

    def _chunked(self, body: bytes):
        environ = RequestFactory()._base_environ(
            PATH_INFO=reverse("api:facts:remember"),
            REQUEST_METHOD="POST",
            CONTENT_TYPE="application/json",
            HTTP_TRANSFER_ENCODING="chunked",
            HTTP_AUTHORIZATION=f"Bearer {self.world.keys['owner']}",
        )
        environ.pop("CONTENT_LENGTH", None)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["wsgi.input_terminated"] = True
        return ClientHandler(enforce_csrf_checks=False)(environ)

    def _stored_essay(self) -> bool:
        from facts.models import Fact

        return Fact.objects.filter(workspace=self.world.w1, key="essay").exists()

    @override_settings(API_MAX_BODY_BYTES=LIMIT)
    def test_chunked_body_over_the_limit_is_refused(self):
        """A chunked body past the limit is a 413 in the documented shape and stores nothing."""
        with quiet_request_log():
            response = self._chunked(self._body(self.LIMIT * 16))
        assert response.status_code == 413, response.content[:300]
        assert error_shape_problem(response) is None
        assert not self._stored_essay()

    @override_settings(API_MAX_BODY_BYTES=LIMIT)
    def test_chunked_body_under_the_limit_is_read_whole(self):
        """A chunked body within the limit is not lost: the write it carries is stored."""
        response = self._chunked(self._body(self.LIMIT // 4))
        assert response.status_code == 201, response.content[:300]
        assert self._stored_essay()

    @override_settings(API_MAX_BODY_BYTES=LIMIT)
    def test_declared_length_over_the_limit_is_refused(self):
        """A Content-Length past the limit is a 413 before anything reads the body."""
        client = Client(raise_request_exception=False)
        response = client.post(
            reverse("api:facts:remember"),
            data=self._body(self.LIMIT * 16),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.world.keys['owner']}",
        )
        assert response.status_code == 413
        assert error_shape_problem(response) is None
        assert not self._stored_essay()
