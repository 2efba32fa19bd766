"""The Export/Import page: download, upload as a job with a progress bar, admins only."""

import json
import tempfile

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.testing import MemoryTestCase
from portability.models import ImportJob
from threads.models import Thread
from threads.services import thread_create


class PortabilityPageTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        thread_create(workspace=cls.workspace, agent=cls.agent, title="Mine")

    def url(self, name, workspace=None, **kwargs):
        return reverse(
            f"memories:{name}", kwargs={"workspace_id": (workspace or self.workspace).pk, **kwargs}
        )

    def download(self, **query):
        self.client.force_login(self.owner)
        response = self.client.get(self.url("portability-export"), query)
        assert response.status_code == 200
        return b"".join(response.streaming_content)

    def test_the_page_and_the_download(self):
        self.client.force_login(self.owner)
        response = self.client.get(self.url("portability"))
        assert response.status_code == 200
        assert b"Download the whole workspace" in response.content
        body = self.download(agent="assistant", history="on")
        header = json.loads(body.splitlines()[0])
        assert header["scope"]["agent"] == "assistant" and header["scope"]["history"] is True

    def test_an_unknown_person_is_a_form_error(self):
        self.client.force_login(self.owner)
        response = self.client.get(self.url("portability-export"), {"person": "telegram:nobody"})
        assert response.status_code == 400
        assert b"No person with this id" in response.content

    def test_an_upload_becomes_a_job_that_runs_and_shows_its_report(self):
        data = self.download()
        self.client.force_login(self.outsider)
        with (
            self.settings(PORTABILITY_IMPORT_DIR=self.enterContext(tempfile.TemporaryDirectory())),
            self.captureOnCommitCallbacks(execute=True),
        ):
            response = self.client.post(
                self.url("portability-import", self.other_workspace),
                {"file": SimpleUploadedFile("acme.jsonl", data)},
                HTTP_HX_REQUEST="true",
                HTTP_HX_TARGET="main",
            )
        assert response.status_code == 200
        job = ImportJob.objects.get(workspace=self.other_workspace)
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 1
        response = self.client.get(
            self.url("portability-job", self.other_workspace, job_id=job.pk),
            HTTP_HX_REQUEST="true",
            HTTP_HX_TARGET="import-job",
        )
        assert response.status_code == 200
        assert b'value="100"' in response.content and b"hx-trigger" not in response.content
        assert b"1 thread" in response.content

    def test_a_queued_job_polls(self):
        job = ImportJob.objects.create(workspace=self.workspace, file_name="big.jsonl", bytes_total=100)
        self.client.force_login(self.owner)
        response = self.client.get(self.url("portability-job", job_id=job.pk), HTTP_HX_REQUEST="true")
        assert b'hx-trigger="every 1s"' in response.content

    def test_only_admins_and_only_their_workspace(self):
        job = ImportJob.objects.create(workspace=self.workspace, file_name="x.jsonl")
        for user in (self.teammate, self.viewer):
            self.client.force_login(user)
            assert self.client.get(self.url("portability")).status_code == 403
            assert self.client.get(self.url("portability-export")).status_code == 403
        self.client.force_login(self.outsider)
        assert self.client.get(self.url("portability")).status_code == 404
        own = self.client.get(self.url("portability-job", self.other_workspace, job_id=job.pk))
        assert own.status_code == 404
