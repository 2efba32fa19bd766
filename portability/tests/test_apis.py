"""GET /api/v1/export/, POST /api/v1/import/ and GET /api/v1/import/<id>/."""

import json

from django.urls import reverse

from core.testing import MemoryTestCase
from facts.services import fact_remember
from portability.models import ImportJob
from portability.tests.helpers import normalized, records
from threads.models import Thread
from threads.services import thread_create


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

    def post_import(self, key, data: bytes, **query):
        url = reverse("api:portability:import")
        if query:
            url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
        return self.client.generic(
            "POST", url, data=data, content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Bearer {key}"
        )

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

    def test_import_into_another_workspace_and_read_the_job(self):
        _, body = self.get_export(self.owner_key, history="true")
        response = self.post_import(self.outsider_key, body, dry_run="true")
        assert response.status_code == 200, response.content
        assert response.json()["report"]["created"]["thread"] == 2
        assert not Thread.objects.filter(workspace=self.other_workspace).exists()
        response = self.post_import(self.outsider_key, body)
        assert response.status_code == 201, response.content
        job = response.json()
        assert job["status"] == "done" and job["progress"]["percent"] == 100
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 2
        detail = self.client.get(
            reverse("api:portability:import-detail", kwargs={"job_id": job["id"]}),
            HTTP_AUTHORIZATION=f"Bearer {self.outsider_key}",
        )
        assert detail.status_code == 200 and detail.json()["id"] == job["id"]
        for key in (self.owner_key, self.agent_key):
            other = self.client.get(
                reverse("api:portability:import-detail", kwargs={"job_id": job["id"]}),
                HTTP_AUTHORIZATION=f"Bearer {key}",
            )
            assert other.status_code == 404
        _, again = self.get_export(self.outsider_key, history="true")
        assert [r for r in normalized(again) if r.get("type") != "agent"] == [
            r for r in normalized(body) if r.get("type") != "agent"
        ]

    def test_import_needs_a_writable_workspace_key(self):
        _, body = self.get_export(self.owner_key)
        assert self.post_import(self.agent_key, body).status_code == 403
        assert self.post_import(self.read_only_key, body).status_code == 403
        assert not ImportJob.objects.exists()

    def test_a_broken_line_answers_400_with_its_number_and_stores_nothing(self):
        _, body = self.get_export(self.owner_key)
        lines = body.splitlines(keepends=True)
        lines[2] = b'{"type": "thread", "id": 7}\n'
        response = self.post_import(self.outsider_key, b"".join(lines))
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["fields"]["line"] == ["3"]
        assert error["message"].startswith("Line 3:")
        assert not Thread.objects.filter(workspace=self.other_workspace).exists()

    def test_a_json_object_body_is_read_as_a_one_line_file(self):
        """The header alone is an empty export: accepted, nothing created."""
        _, body = self.get_export(self.owner_key)
        header = json.loads(body.splitlines()[0])
        response = self.client.post(
            reverse("api:portability:import"),
            header,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.outsider_key}",
        )
        assert response.status_code == 201, response.content
        assert response.json()["report"]["created"] == {}
        response = self.client.post(
            reverse("api:portability:import"),
            {**header, "version": "1"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.outsider_key}",
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "unsupported_version"
