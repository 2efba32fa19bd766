"""GET /api/v1/export/, POST /api/v1/import/ and GET /api/v1/import/<id>/."""

import gzip
import io
import json
import os
import shutil
import tempfile
import tracemalloc
import uuid

from django.urls import reverse

from core.testing import MemoryTestCase
from facts.services import fact_remember
from portability.models import ImportJob
from portability.responses import NDJSON
from portability.services import import_job_run
from portability.tests.helpers import normalized, records
from threads.models import Message, Thread
from threads.services import thread_append_messages, thread_create


class PortabilityApiTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        thread_create(workspace=cls.workspace, agent=cls.agent, title="Mine")
        thread_create(workspace=cls.workspace, agent=cls.other_agent, title="Theirs")
        fact_remember(workspace=cls.workspace, key="tone", value="dry", scope="agent", agent=cls.agent)

    def get_export(self, key, **query):
        response = self.client.get(
            reverse("api:portability:export"), query, HTTP_AUTHORIZATION=f"Bearer {key}"
        )
        body = b"".join(response.streaming_content) if response.streaming else response.content
        return response, body

    def post_import(self, key, data: bytes, *, run=True, content_type=NDJSON, headers=None, **query):
        """POST the body; with `run`, the worker runs the job as the request commits."""
        url = reverse("api:portability:import")
        if query:
            url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
        with (
            self.settings(PORTABILITY_IMPORT_DIR=self.import_dir),
            self.captureOnCommitCallbacks(execute=run),
        ):
            return self.client.generic(
                "POST",
                url,
                data=data,
                content_type=content_type,
                HTTP_AUTHORIZATION=f"Bearer {key}",
                headers=headers,
            )

    def get_job(self, key, job_id):
        return self.client.get(
            reverse("api:portability:import-detail", kwargs={"job_id": job_id}),
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )

    def setUp(self):
        super().setUp()
        self.import_dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.import_dir, True)

    def assert_no_file_left(self):
        assert os.listdir(self.import_dir) == []

    def test_export_streams_json_lines(self):
        response, body = self.get_export(self.owner_key, history="true")
        assert response.status_code == 200
        assert response["Content-Type"] == "application/x-ndjson"
        assert "attachment" in response["Content-Disposition"]
        rows = records(body)
        assert rows[0]["format"] == "memory-export" and rows[0]["version"] == 1
        assert rows[0]["scope"]["kind"] == "workspace"
        assert {r["title"] for r in rows if r.get("type") == "thread"} == {"Mine", "Theirs"}

    def test_an_agent_bound_key_exports_only_its_agent(self):
        response, body = self.get_export(self.agent_key)
        assert response.status_code == 200
        rows = records(body)
        assert rows[0]["scope"] == {"kind": "agent", "agent": "assistant", "history": False, "vectors": False}
        assert {r["title"] for r in rows if r.get("type") == "thread"} == {"Mine"}
        response, _ = self.get_export(self.agent_key, agent="researcher")
        assert response.status_code == 404

    def test_export_refuses_bad_parameters(self):
        for query in ({"history": "maybe"}, {"memory_user": "nope"}, {"agent": "ghost"}, {"colour": "red"}):
            response, _ = self.get_export(self.owner_key, **query)
            assert response.status_code in (400, 404), query
            assert "error" in response.json()

    def test_import_into_another_workspace_is_a_job_to_poll(self):
        _, body = self.get_export(self.owner_key, history="true")
        response = self.post_import(self.outsider_key, body, run=False, dry_run="true")
        assert response.status_code == 202, response.content
        job = response.json()
        assert job["status"] == "queued" and job["dry_run"] is True and job["attempts"] == 0
        assert job["progress"] == {"done": 0, "total": len(body), "lines": 0, "percent": 0}
        location = reverse("api:portability:import-detail", kwargs={"job_id": job["id"]})
        assert response["Location"] == f"http://testserver{location}"
        assert self.get_job(self.outsider_key, job["id"]).json()["status"] == "queued"
        import_job_run(job_id=job["id"])  # the worker
        done = self.get_job(self.outsider_key, job["id"]).json()
        assert done["status"] == "done" and done["report"]["created"]["thread"] == 2
        assert done["progress"]["percent"] == 100 and done["attempts"] == 1
        assert not Thread.objects.filter(workspace=self.other_workspace).exists()
        self.assert_no_file_left()

        response = self.post_import(self.outsider_key, body, file_name="acme.jsonl")
        assert response.status_code == 202, response.content
        job = self.get_job(self.outsider_key, response.json()["id"]).json()
        assert job["status"] == "done" and job["file_name"] == "acme.jsonl", job
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 2
        # Another workspace's keys, and an agent-bound key of this one, see no such job.
        for key in (self.owner_key, self.agent_key):
            assert self.get_job(key, job["id"]).status_code == 404
        _, again = self.get_export(self.outsider_key, history="true")
        assert [r for r in normalized(again) if r.get("type") != "agent"] == [
            r for r in normalized(body) if r.get("type") != "agent"
        ]
        # Twice: nothing new.
        response = self.post_import(self.outsider_key, body)
        job = self.get_job(self.outsider_key, response.json()["id"]).json()
        assert job["status"] == "done" and job["report"]["created"] == {}
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 2
        self.assert_no_file_left()

    def test_import_needs_a_writable_workspace_key(self):
        _, body = self.get_export(self.owner_key)
        assert self.post_import(self.agent_key, body).status_code == 403
        assert self.post_import(self.read_only_key, body).status_code == 403
        assert not ImportJob.objects.exists()
        self.assert_no_file_left()

    def test_a_broken_line_fails_the_job_with_its_number_and_stores_nothing(self):
        _, body = self.get_export(self.owner_key)
        lines = body.splitlines(keepends=True)
        lines[2] = b'{"type": "thread", "id": 7}\n'
        response = self.post_import(self.outsider_key, b"".join(lines))
        assert response.status_code == 202
        job = self.get_job(self.outsider_key, response.json()["id"]).json()
        assert job["status"] == "failed"
        assert job["error"]["line"] == 3 and job["error"]["code"] == "malformed_line"
        assert job["error"]["message"].startswith("Line 3:")
        assert not Thread.objects.filter(workspace=self.other_workspace).exists()
        self.assert_no_file_left()

    def test_a_body_that_is_not_an_export_is_refused_at_once(self):
        """The first line is checked as the body arrives: no job, no file."""
        _, body = self.get_export(self.owner_key)
        header, rest = body.split(b"\n", 1)
        bodies = {
            "empty": (b"", "malformed_header"),
            "not json": (b"{nope\n" + rest, "malformed_header"),
            "a record first": (rest, "malformed_header"),
            "another format": (b'{"format": "csv"}\n' + rest, "malformed_header"),
            "version 2": (
                header.replace(b'"version":1', b'"version":2') + b"\n" + rest,
                "unsupported_version",
            ),
            "nul": (header[:-1] + b',"x":"\\u0000"}\n', "malformed_header"),
            "a header line of 100 KB": (b" " * 100_000 + header, "malformed_header"),
        }
        for name, (data, code) in bodies.items():
            response = self.post_import(self.outsider_key, data)
            assert response.status_code == 400, (name, response.content)
            assert response.json()["error"]["code"] == code, (name, response.json())
        for content_type in (
            "multipart/form-data; boundary=x",
            "application/x-www-form-urlencoded",
            "text/csv",
        ):
            response = self.post_import(self.outsider_key, body, content_type=content_type)
            assert response.status_code == 415, content_type
            assert response.json()["error"]["code"] == "unsupported_media_type"
        response = self.post_import(self.outsider_key, body, headers={"Content-Encoding": "br"})
        assert response.status_code == 415
        assert not ImportJob.objects.exists()
        self.assert_no_file_left()

    def test_a_json_object_body_is_read_as_a_one_line_file(self):
        """The header alone is an empty export: accepted, nothing created."""
        _, body = self.get_export(self.owner_key)
        header = json.loads(body.splitlines()[0])
        response = self.post_import(
            self.outsider_key, json.dumps(header).encode(), content_type="application/json"
        )
        assert response.status_code == 202, response.content
        job = self.get_job(self.outsider_key, response.json()["id"]).json()
        assert job["status"] == "done" and job["report"]["created"] == {}
        response = self.post_import(
            self.outsider_key,
            json.dumps({**header, "version": "1"}).encode(),
            content_type="application/json",
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "unsupported_version"

    def test_gzip_bodies_are_inflated_as_they_arrive(self):
        _, body = self.get_export(self.owner_key)
        response = self.post_import(
            self.outsider_key, gzip.compress(body), headers={"Content-Encoding": "gzip"}
        )
        assert response.status_code == 202, response.content
        job = self.get_job(self.outsider_key, response.json()["id"]).json()
        assert job["status"] == "done" and job["progress"]["total"] == len(body)
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 2
        for data in (b"not gzip at all", gzip.compress(body)[:-20]):
            response = self.post_import(self.outsider_key, data, headers={"Content-Encoding": "gzip"})
            assert response.status_code == 400, response.content
            assert response.json()["error"]["code"] == "malformed_request"
        self.assert_no_file_left()

    def test_past_its_limit_the_import_is_413_and_other_routes_keep_theirs(self):
        _, body = self.get_export(self.owner_key, history="true")
        with self.settings(API_MAX_BODY_BYTES=len(body) // 2, PORTABILITY_IMPORT_MAX_BYTES=len(body)):
            # Over the API's own limit, within the import's: accepted.
            assert self.post_import(self.outsider_key, body, run=False).status_code == 202
            response = self.post_import(self.outsider_key, body + b"\n", run=False)
            assert response.status_code == 413
            assert response.json()["error"]["code"] == "payload_too_large"
            assert "PORTABILITY_IMPORT_MAX_BYTES" in response.json()["error"]["message"]
            # A gzip bomb: 64 MB of zeros in 64 KB stops at the limit, inflated in small steps.
            bomb = gzip.compress(body + b"\0" * (64 * 1024 * 1024), compresslevel=9)
            assert len(bomb) < 100_000
            response = self.post_import(
                self.outsider_key, bomb, run=False, headers={"Content-Encoding": "gzip"}
            )
            assert response.status_code == 413
            # A chunked body, no length declared: counted as it is read.
            response = self.post_chunked(self.outsider_key, body + b"\n" * 10)
            assert response.status_code == 413
            response = self.client.post(
                reverse("api:agents:list"),
                {"slug": "big", "name": "x" * len(body)},
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {self.owner_key}",
            )
            assert response.status_code == 413
        assert ImportJob.objects.count() == 1
        assert len(os.listdir(self.import_dir)) == 1  # the accepted one's, waiting for its worker

    def post_chunked(self, key, data: bytes, *, terminated=True, stream=None):
        environ = {
            "CONTENT_LENGTH": "",
            "HTTP_TRANSFER_ENCODING": "chunked",
            "wsgi.input": stream or io.BytesIO(data),
            "wsgi.input_terminated": terminated,
        }
        with (
            self.settings(PORTABILITY_IMPORT_DIR=self.import_dir),
            self.captureOnCommitCallbacks(execute=False),
        ):
            return self.client.generic(
                "POST",
                reverse("api:portability:import"),
                b"",
                content_type=NDJSON,
                HTTP_AUTHORIZATION=f"Bearer {self.outsider_key}",
                **environ,
            )

    def test_a_chunked_body_is_read_to_its_end(self):
        _, body = self.get_export(self.owner_key)
        response = self.post_chunked(self.outsider_key, body)
        assert response.status_code == 202, response.content
        assert response.json()["progress"]["total"] == len(body)
        assert self.post_chunked(self.outsider_key, body, terminated=False).status_code == 411

    def test_a_large_body_is_streamed_never_held_whole(self):
        """24 MB arrive through a 24 MB stream that is produced as it is read: the request's
        peak of Python allocations stays a small fraction of it."""
        _, body = self.get_export(self.owner_key)
        header = body.split(b"\n", 1)[0] + b"\n"
        filler = b'{"type": "agent", "id": "x", "slug": "' + b"y" * 990 + b'"}\n'
        lines = 24 * 1024
        stream = _LineStream(header, filler, lines)
        tracemalloc.start()
        try:
            response = self.post_chunked(self.outsider_key, b"", stream=stream)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert response.status_code == 202, response.content
        size = len(header) + len(filler) * lines
        assert size > 24_000_000 and response.json()["progress"]["total"] == size
        print(f"upload of {size} bytes: peak {peak} bytes")
        assert peak < 2_000_000, peak
        (path,) = os.listdir(self.import_dir)
        assert os.path.getsize(os.path.join(self.import_dir, path)) == size

    def test_a_multi_megabyte_export_goes_through_the_api(self):
        """3 MB of messages: streamed in, 202, queued, run by the worker, polled to done."""
        thread = thread_create(workspace=self.workspace, agent=self.agent, title="Long")
        thread_append_messages(thread=thread, messages=[{"role": "user", "content": "hello"}])
        _, body = self.get_export(self.owner_key)
        rows = records(body)
        template = next(r for r in rows[1:] if r["type"] == "message")
        out = [rows[0], *[r for r in rows[1:] if r["type"] not in ("message", "end")]]
        count = 1500
        for seq in range(count):
            out.append(
                {**template, "id": str(uuid.uuid4()), "seq": seq + 10, "content": f"{seq} " + "z" * 2000}
            )
        out.append({"type": "end", "count": len(out) - 1})
        data = b"".join(json.dumps(r).encode() + b"\n" for r in out)
        assert len(data) > 3_000_000
        response = self.post_import(self.outsider_key, data, run=False)
        assert response.status_code == 202, response.content
        job_id = response.json()["id"]
        assert self.get_job(self.outsider_key, job_id).json()["status"] == "queued"
        import_job_run(job_id=job_id)
        job = self.get_job(self.outsider_key, job_id).json()
        assert job["status"] == "done", job["error"]
        assert job["report"]["created"]["message"] == count
        assert job["progress"] == {
            "done": len(data),
            "total": len(data),
            "lines": len(out) - 2,
            "percent": 100,
        }
        assert Message.objects.filter(workspace=self.other_workspace).count() == count
        self.assert_no_file_left()


class _LineStream:
    """A request body of `header` then `count` copies of `line`, made as it is read."""

    def __init__(self, header: bytes, line: bytes, count: int):
        self.pending = header
        self.line = line
        self.left = count

    def read(self, size=-1):
        while len(self.pending) < size and self.left:
            self.pending += self.line
            self.left -= 1
        if size < 0:
            raise AssertionError("the whole body was asked for")
        out, self.pending = self.pending[:size], self.pending[size:]
        return out

    def readline(self, size=-1):
        raise AssertionError("the body is read in chunks, not lines")
