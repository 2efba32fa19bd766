"""Isolation matrix (issue 11): every /api/v1/ and /memories/ route, every method it answers,
against every kind of caller. Generated from the URL configuration; a route without a case in
routes.py fails the first test.

Each request runs inside a savepoint that is rolled back, so every case starts from the same
seeded world and the row snapshot taken right after the request shows exactly what it wrote.
"""

import json
from urllib.parse import urlencode

import pytest
from django.http import HttpResponse
from django.test import Client, TestCase
from django.urls import reverse

from core.tests.reliability.routes import (
    A1_SLUG,
    A2_SLUG,
    API_CASES,
    BROWSER_CASES,
    UNSAFE,
    api_request,
    error_shape_problem,
    isolated,
    quiet_request_log,
    random_twin,
    response_json,
    routes,
    seed_world,
    snapshot,
    snapshot_diff,
)

pytestmark = pytest.mark.reliability

API_PERSONAS = ("owner", "other_agent", "read_only", "other_workspace", "no_key")
BROWSER_PERSONAS = ("owner", "editor", "viewer", "outsider", "anonymous")
LEVEL_ORDER = {"read": 0, "edit": 1, "admin": 2}
ROLE_LEVEL = {"owner": 2, "editor": 1, "viewer": 0}
SEP = "\x1f"
BODILESS = {
    ("api:threads:compact", "post"),
    ("api:webhooks:rotate-secret", "post"),
    ("api:webhooks:ping", "post"),
    ("api:retention:runs", "post"),
}


class IsolationMatrixTests(TestCase):
    """Personas (API): owner = W1-wide writable key; other_agent = key bound to a2, which owns
    none of the seeded rows; read_only = W1 read-only key; other_workspace = W2's key; no_key.
    Personas (/memories): W1 admin, editor, viewer; the outsider (W2's admin); anonymous."""

    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()
        # Every request is rolled back, so the seeded rows are the baseline of each one.
        cls.baseline = snapshot(cls.world.w1)

    # -- coverage ---------------------------------------------------------------------------

    def test_every_route_has_a_case(self):
        """Adding a route without isolation cases fails here; so does a case left for a removed route."""
        found = routes()
        names = {route.name for route in found}
        missing = [r.name for r in found if r.name not in API_CASES and r.name not in BROWSER_CASES]
        stale = sorted((set(API_CASES) | set(BROWSER_CASES)) - names)
        assert not missing, f"routes without a case in core/tests/reliability/routes.py: {missing}"
        assert not stale, f"cases for routes that no longer exist: {stale}"
        for route in found:
            if route.name in API_CASES:
                case = API_CASES[route.name]
                unknown = set(case.bodies) - set(route.methods)
                assert not unknown, f"{route.name}: bodies for methods it does not answer: {unknown}"
                writes = [m for m in route.methods if m in ("post", "put", "patch")]
                no_body = {(route.name, m) for m in writes if m not in case.bodies}
                # A write without a valid body in its case would only ever be tested with an
                # empty one; the operations that read no body are listed.
                assert no_body <= BODILESS, f"write operations without a valid body: {no_body - BODILESS}"
            else:
                case = BROWSER_CASES[route.name]
                assert set(route.methods) <= set(case.levels), (
                    f"{route.name} answers {route.methods}, the case only covers {sorted(case.levels)}"
                )

    # -- API --------------------------------------------------------------------------------

    def test_api_matrix(self):
        """No read or write crosses an agent or workspace boundary, on any route or method."""
        w = self.world
        with quiet_request_log():
            for route in routes(("api/v1/",)):
                case = API_CASES[route.name]
                path = reverse(route.name, kwargs=case.path(w))
                for method in route.methods:
                    body = case.bodies[method](w) if method in case.bodies else None
                    query = case.query[method](w) if method in case.query else None
                    write = method in UNSAFE and not route.read_only_safe
                    for persona in API_PERSONAS:
                        with self.subTest(route=route.name, method=method, persona=persona):
                            self._api_case(route, case, method, persona, path, body, query, write)
                    for index, ref in enumerate(case.refs):
                        if ref.method != method:
                            continue
                        ref_path = reverse(route.name, kwargs=ref.path(w)) if ref.path else path
                        with self.subTest(route=route.name, method=method, persona="other_agent", ref=index):
                            self._cross(
                                "other_agent",
                                case,
                                method,
                                ref_path,
                                self._drop_agent(case, ref.body(w)),
                                None,
                            )

    def _drop_agent(self, case, body):
        if isinstance(body, dict) and case.agent_field:
            body = {k: v for k, v in body.items() if k != case.agent_field}
        return body

    def _api_case(self, route, case, method, persona, path, body, query, write):
        w = self.world
        if persona == "owner":
            response = isolated(
                lambda: api_request(method, path, body=body, key=w.keys["owner"], query=query)
            )
            assert response.status_code < 400, (
                f"the valid request of the case is refused for the owner: {response.status_code} "
                f"{response.content[:300]!r}"
            )
            return
        if persona == "no_key":
            status, problems = self._forbidden(method, path, body, query, key=None)
            assert status == 401, f"no key: {status}"
            assert not problems, problems
            return
        if persona == "read_only":
            status, problems = self._forbidden(method, path, body, query, key=w.keys["read_only"])
            if write:
                assert status == 403, f"a read-only key writing got {status}"
            else:
                assert status < 400, f"a read-only key reading got {status}"
            assert not problems, problems
            return
        if persona == "other_agent" and method in case.workspace_level:
            status, problems = self._forbidden(
                method, path, self._drop_agent(case, body), query, key=w.keys["other_agent"]
            )
            assert status == 403, f"an agent-bound key did a workspace-level act: {status}"
            assert not problems, problems
            return
        if persona == "other_agent":
            body = self._drop_agent(case, body)
        self._cross(persona, case, method, path, body, query)

    def _forbidden(self, method, path, body, query, *, key):
        """Status of a request that must change nothing, and what went wrong."""
        w = self.world
        before = self.baseline

        def run():
            response = api_request(method, path, body=body, key=key, query=query)
            problems = snapshot_diff(before, snapshot(w.w1)) if response.status_code < 500 else []
            if response.status_code >= 400:
                shape = error_shape_problem(response)
                if shape:
                    problems.append(shape)
            return response.status_code, problems

        return isolated(run)

    def _cross(self, persona, case, method, path, body, query):
        """The request naming W1 / a1 rows answers exactly like the same request naming random
        ids, shows none of them, and stores nothing in their rows."""
        w = self.world
        key = w.keys[persona]
        if persona == "other_agent":
            originals, secrets, rows = [*w.a1_ids, A1_SLUG], w.a1_ids, w.a1_rows
        else:
            originals, secrets, rows = [*w.w1_ids, A1_SLUG, A2_SLUG], w.w1_ids, None
        body_text = "" if body is None else json.dumps(body)
        query_text = urlencode(query or {})
        twin_text, back = random_twin(SEP.join([path, body_text, query_text]), originals)
        twin_path, twin_body, twin_query = twin_text.split(SEP)
        before = self.baseline

        def run():
            response = api_request(method, path, body=body_text.encode() or None, key=key, query=query)
            if response.status_code >= 500:
                return response, [f"server error {response.status_code}"]
            after = snapshot(w.w1)
            if persona == "other_agent" and response.status_code < 400:
                problems = snapshot_diff(before, after, only=rows)
            else:
                problems = snapshot_diff(before, after)
            return response, problems

        response, problems = isolated(run)
        twin = isolated(
            lambda: api_request(
                method,
                twin_path,
                body=twin_body.encode() or None,
                key=key,
                query=dict(pair.split("=", 1) for pair in twin_query.split("&")) if twin_query else None,
            )
        )
        assert not problems, problems
        twin_content = twin.content.decode(errors="replace")
        for fake, original in back.items():
            twin_content = twin_content.replace(fake, original)
        assert response.status_code == twin.status_code, (
            f"answers {response.status_code} where a random id answers {twin.status_code}: "
            f"{response.content[:300]!r} vs {twin_content[:300]!r}"
        )
        if response.status_code >= 400:
            assert error_shape_problem(response) is None, error_shape_problem(response)
            assert response_json(response) == json.loads(twin_content), (
                f"error differs from a random id's: {response.content[:300]!r} vs {twin_content[:300]!r}"
            )
            return
        # Ids the request itself named may be echoed (a batch delete's not_found); the twin
        # check above already showed they answer like random ids.
        sent = SEP.join([path, body_text, query_text])
        text = response.content.decode(errors="replace")
        shown = [secret for secret in secrets if secret in text and secret not in sent]
        assert not shown, f"the response shows rows it must not: {shown}"
        self._check_counts(response_json(response))

    def _check_counts(self, data):
        """P1 talks only to a1: no other caller may count P1's threads or messages; a list's
        count never includes rows it does not return."""
        p1 = str(self.world.p1.pk)
        stack = [data]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                if item.get("id") == p1:
                    counts = (item.get("thread_count"), item.get("message_count"))
                    assert not any(counts), f"P1's counts include a1's rows: {counts}"
                results = item.get("results")
                whole = not item.get("previous") and item.get("next") is None
                if isinstance(item.get("count"), int) and isinstance(results, list) and whole:
                    assert item["count"] == len(results), f"count {item['count']} for {len(results)} rows"
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)

    # -- /memories --------------------------------------------------------------------------

    def test_browser_matrix(self):
        """Operators read and write only inside their workspace, within their role."""
        with quiet_request_log():
            for route in routes(("memories/",)):
                case = BROWSER_CASES[route.name]
                for method in route.methods:
                    for persona in BROWSER_PERSONAS:
                        with self.subTest(route=route.name, method=method, persona=persona):
                            self._browser_case(route, case, method, persona)

    def _page(self, persona, method, url, data):
        client = Client(raise_request_exception=False)
        if persona != "anonymous":
            client.force_login(self.world.operators[persona])
        if method == "get":
            response = client.get(url)
            if response.streaming:
                # A download (the audit CSV): read it here, inside the request's isolation.
                body = b"".join(response.streaming_content)
                content_type = response["Content-Type"]
                response = HttpResponse(body, status=response.status_code, content_type=content_type)
            return response
        return client.post(url, data or {})

    def _browser_url(self, route, case, workspace):
        kwargs = case.path(self.world)
        if case.in_workspace:
            kwargs = {"workspace_id": workspace.pk, **kwargs}
        return reverse(route.name, kwargs=kwargs)

    def _browser_case(self, route, case, method, persona):
        w = self.world
        level = case.levels[method]
        data = case.data[method](w) if method in case.data else None
        url = self._browser_url(route, case, w.w1)
        before = self.baseline

        def run(persona=persona, url=url, data=data):
            response = self._page(persona, method, url, data)
            problems = snapshot_diff(before, snapshot(w.w1)) if response.status_code < 500 else []
            return response, problems

        if persona == "owner" or (persona in ROLE_LEVEL and ROLE_LEVEL[persona] >= LEVEL_ORDER[level]):
            response, _ = isolated(run)
            allowed = 400 if case.form_incomplete else 399
            status = response.status_code
            assert status <= allowed, f"{persona} is refused a {level} page: {status}"
            if method == "get" and persona != "owner":
                # Reading leaves nothing behind.
                _, problems = isolated(run)
                assert not problems, problems
            return
        if persona in ROLE_LEVEL:
            response, problems = isolated(run)
            assert response.status_code in (403, 404), f"{persona} on a {level} page: {response.status_code}"
            assert not problems, problems
            return
        if persona == "anonymous":
            response, problems = isolated(run)
            assert response.status_code == 302 and "/accounts/login/" in response["Location"], (
                f"anonymous: {response.status_code}"
            )
            assert not problems, problems
            return
        # The outsider: W1's pages are 404; their own workspace's pages, sent W1's ids, answer
        # like random ids and touch nothing of W1.
        if not case.in_workspace:
            response, problems = isolated(run)
            assert str(w.w1.pk) not in response.get("Location", ""), "the outsider is sent into W1"
            assert not problems, problems
            return
        response, problems = isolated(run)
        assert response.status_code == 404, f"the outsider on a W1 page: {response.status_code}"
        assert not problems, problems
        own_url = self._browser_url(route, case, w.w2)
        data_text = json.dumps(data or {})
        twin_text, _ = random_twin(SEP.join([own_url, data_text]), w.w1_ids)
        twin_url, twin_data = twin_text.split(SEP)
        response, problems = isolated(lambda: run(url=own_url))
        twin, _ = isolated(lambda: run(url=twin_url, data=json.loads(twin_data)))
        assert not problems, problems
        assert response.status_code == twin.status_code, (
            f"in their own workspace, W1's ids answer {response.status_code}, random ids {twin.status_code}"
        )
        text = response.content.decode(errors="replace") + response.get("Location", "")
        shown = [secret for secret in w.w1_ids if secret in text]
        assert not shown, f"W1 rows shown to the outsider: {shown}"
