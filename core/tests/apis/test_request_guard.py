"""The request-level guard of the API (core/parsers.py, core/middleware.py), issue 11 finding 3."""

import io
import json

from django.test import override_settings

from checkpoints.models import Checkpoint
from core.models import Agent
from core.parsers import JSON_MAX_DEPTH, JSON_NUL, JSON_NUMBER_RANGE, JSON_SURROGATE
from core.testing import MemoryTestCase
from facts.models import Fact
from threads.models import RunSnapshot
from threads.tests.factories import make_thread

REMEMBER = "/api/v1/facts/remember/"


class JsonBodyGuardTests(MemoryTestCase):
    def post_raw(self, path: str, body: str | bytes, method: str = "post"):
        return getattr(self.api(), method)(path, data=body, content_type="application/json")

    def remember(self, value_json: str, key_json: str = '"color"'):
        body = f'{{"agent": "assistant", "scope": "agent", "key": {key_json}, "value": {value_json}}}'
        return self.post_raw(REMEMBER, body)

    def assert_malformed(self, response, fields=None):
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "malformed_request"
        assert error["message"]
        if fields is not None:
            assert error["fields"] == fields

    def test_escaped_nul_in_a_value_is_refused_and_nothing_stored(self):
        """A \\u0000 escape anywhere in the body is a 400 before any service runs."""
        self.assert_malformed(self.remember('"a\\u0000b"'), fields={"value": [JSON_NUL]})
        response = self.remember('{"nested": ["ok", "x\\u0000"]}')
        self.assert_malformed(response, fields={"value.nested[1]": [JSON_NUL]})
        assert Fact.objects.count() == 0

    def test_escaped_nul_in_a_key_is_refused(self):
        self.assert_malformed(self.remember('"v"', key_json='"k\\u0000"'))
        self.assert_malformed(self.remember('{"a\\u0000": 1}'))
        assert Fact.objects.count() == 0

    def test_raw_nul_byte_is_refused(self):
        body = b'{"agent": "assistant", "scope": "agent", "key": "k", "value": "a\x00b"}'
        self.assert_malformed(self.post_raw(REMEMBER, body))
        assert Fact.objects.count() == 0

    def test_lone_surrogate_is_refused(self):
        """A lone surrogate is not text: psycopg could not encode it (a bare 500 before)."""
        for value in ['"\\ud800"', '"x\\udfff"']:
            self.assert_malformed(self.remember(value), fields={"value": [JSON_SURROGATE]})
        self.assert_malformed(self.remember('["\\ud83d"]'), fields={"value[0]": [JSON_SURROGATE]})
        assert Fact.objects.count() == 0

    def test_surrogate_pair_is_one_character_and_stored(self):
        response = self.remember('"smile \\ud83d\\ude00"')
        assert response.status_code == 201, response.content
        assert Fact.objects.get().value == "smile \U0001f600"

    def test_deep_nesting_is_refused_without_recursion_error(self):
        """JSON nested 3,000-10,000 deep raised RecursionError (a 500)."""
        for depth in (3_000, 10_000):
            self.assert_malformed(self.remember("[" * depth + "]" * depth), fields={})
            self.assert_malformed(self.remember('{"a":' * depth + "1" + "}" * depth))
        assert Fact.objects.count() == 0

    def test_depth_limit_counts_the_body_itself(self):
        """The body object is level 1: a value nested to the limit passes, one more is refused."""
        inside = JSON_MAX_DEPTH - 1
        response = self.remember("[" * inside + "]" * inside)
        assert response.status_code == 201, response.content
        self.assert_malformed(self.remember("[" * (inside + 1) + "]" * (inside + 1), key_json='"other"'))
        assert Fact.objects.count() == 1

    def test_nan_and_infinity_are_refused(self):
        for literal in ("NaN", "Infinity", "-Infinity"):
            self.assert_malformed(self.remember(literal))
        assert Fact.objects.count() == 0

    def test_a_number_past_the_float_range_is_refused_as_infinity_would_be(self):
        """json.loads reads 1e999 as infinity, which jsonb cannot hold: it had reached the
        database (a generic 400 naming nothing, or a 500 where a form saved it)."""
        for literal in ("1e999", "-1e999", '{"deep": [1.5e400]}'):
            response = self.remember(literal)
            self.assert_malformed(response)
            assert response.json()["error"]["message"] == JSON_NUMBER_RANGE
        body = b'{"agent": "assistant", "scope": "agent", "key": "k", "value": 1e999}'
        self.assert_malformed(self.post_raw(REMEMBER, body))
        assert Fact.objects.count() == 0
        assert self.remember("1e308").status_code == 201

    def test_invalid_utf8_is_refused(self):
        body = b'{"agent": "assistant", "scope": "agent", "key": "k", "value": "\xff\xfe"}'
        self.assert_malformed(self.post_raw(REMEMBER, body))
        assert Fact.objects.count() == 0

    def test_malformed_json_is_refused(self):
        self.assert_malformed(self.post_raw(REMEMBER, '{"key": '))

    def test_guard_covers_every_json_body(self):
        """The guard is the parser of every view: checkpoint metadata, run snapshots, agents."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        checkpoint = (
            '{"checkpoint_id": "c1", "checkpoint": {"type": "json", "data": "e30="}, '
            '"metadata": {"step": "\\u0000"}}'
        )
        self.assert_malformed(self.post_raw(f"/api/v1/threads/{thread.pk}/checkpoints/", checkpoint, "put"))
        snapshot = '{"snapshot": {"s": "\\ud800"}}'
        url = f"/api/v1/threads/{thread.pk}/runs/r1/snapshot/"
        self.assert_malformed(self.post_raw(url, snapshot, "put"))
        self.assert_malformed(self.post_raw("/api/v1/agents/", '{"slug": "a", "name": "\\u0000"}'))
        assert Checkpoint.objects.count() == 0
        assert RunSnapshot.objects.count() == 0
        assert not Agent.objects.filter(slug="a").exists()

    def test_form_and_multipart_bodies_are_unsupported(self):
        response = self.api().post("/api/v1/agents/", {"slug": "formed"}, format="multipart")
        assert response.status_code == 415
        assert response.json()["error"]["code"] == "unsupported_media_type"
        response = self.api().post(
            "/api/v1/agents/", data="slug=formed", content_type="application/x-www-form-urlencoded"
        )
        assert response.status_code == 415
        assert not Agent.objects.filter(slug="formed").exists()


class ChunkedBodyTests(MemoryTestCase):
    """A chunked body has no Content-Length; gunicorn marks its input as terminated."""

    def post_chunked(self, body: bytes, **extra):
        environ = {
            "CONTENT_LENGTH": "",
            "HTTP_TRANSFER_ENCODING": "chunked",
            "wsgi.input": io.BytesIO(body),
            "wsgi.input_terminated": True,
            **extra,
        }
        return self.api().generic("POST", "/api/v1/agents/", b"", content_type="application/json", **environ)

    @override_settings(API_MAX_BODY_BYTES=100)
    def test_chunked_body_over_the_limit_is_413(self):
        body = json.dumps({"slug": "chunky", "name": "x" * 200}).encode()
        response = self.post_chunked(body)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"
        assert not Agent.objects.filter(slug="chunky").exists()

    @override_settings(API_MAX_BODY_BYTES=100)
    def test_chunked_body_within_the_limit_is_read(self):
        """Before, Django read a body without Content-Length as empty: the write lost its body."""
        response = self.post_chunked(json.dumps({"slug": "chunky", "name": "Chunky"}).encode())
        assert response.status_code == 201, response.content
        assert Agent.objects.get(workspace=self.workspace, slug="chunky").name == "Chunky"

    def test_chunked_body_without_a_terminated_input_is_411(self):
        response = self.post_chunked(b'{"slug": "chunky"}', **{"wsgi.input_terminated": False})
        assert response.status_code == 411
        assert response.json()["error"]["code"] == "length_required"
        assert not Agent.objects.filter(slug="chunky").exists()


class NulInUrlTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent)

    def assert_malformed(self, response):
        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "malformed_request"

    def test_nul_in_query_string_is_400(self):
        self.assert_malformed(
            self.api().get(f"/api/v1/threads/{self.thread.pk}/checkpoints/?checkpoint_ns=a%00b")
        )
        self.assert_malformed(self.api().get("/api/v1/facts/?key=a%00b"))

    def test_json_in_a_query_parameter_passes_the_same_guard(self):
        """`?metadata=` is a JSON object: deep nesting raised RecursionError, \\u0000 reached jsonb."""
        url = f"/api/v1/threads/{self.thread.pk}/checkpoints/"
        for document in ('{"a": "\\u0000"}', '{"a":' * 5000 + "1" + "}" * 5000, '{"a": NaN}'):
            response = self.api().get(url, {"metadata": document})
            assert response.status_code == 400, (document[:20], response.content)
            assert response.json()["error"]["code"] == "invalid"
        assert self.api().get(url, {"metadata": '{"source": "loop"}'}).status_code == 200

    def test_nul_in_path_is_400(self):
        base = f"/api/v1/threads/{self.thread.pk}"
        self.assert_malformed(self.api().get(f"{base}/runs/a%00b/snapshot/"))
        self.assert_malformed(
            self.api().put(f"{base}/runs/a%00b/snapshot/", {"snapshot": {"s": 1}}, format="json")
        )
        self.assert_malformed(self.api().get(f"{base}/checkpoints/a%00b/"))
        assert RunSnapshot.objects.count() == 0
