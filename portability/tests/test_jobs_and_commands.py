"""Import jobs (an upload run by a worker) and the two management commands."""

import io
import json
import os
import tempfile

from django.core.management import CommandError, call_command

from core.services import workspace_create
from core.testing import MemoryTestCase, cache_down
from portability.models import ImportJob
from portability.registry import Scope
from portability.services import import_job_create, import_job_progress, import_job_run, import_upload_path
from portability.tests.helpers import export_bytes, normalized
from threads.models import Thread
from threads.services import thread_create


class JobCase(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        thread_create(workspace=cls.workspace, agent=cls.agent, title="Mine")
        cls.data = export_bytes(Scope(workspace=cls.workspace))

    def job_for(self, data: bytes, **kwargs) -> ImportJob:
        with self.settings(PORTABILITY_IMPORT_DIR=self.enterContext(tempfile.TemporaryDirectory())):
            path = import_upload_path()
        with open(path, "wb") as f:
            f.write(data)
        return import_job_create(
            workspace=self.other_workspace,
            actor="operator:t",
            file_name="x.jsonl",
            file_path=path,
            bytes_total=len(data),
            **kwargs,
        )


class JobTests(JobCase):
    def test_a_job_runs_once_and_reports(self):
        job = self.job_for(self.data)
        assert import_job_progress(job)["percent"] == 0
        job = import_job_run(job_id=job.pk)
        assert job.status == "done" and job.report["created"]["thread"] == 1
        assert import_job_progress(job) == {
            "done": len(self.data),
            "total": len(self.data),
            "lines": 3,
            "percent": 100,
        }
        assert not os.path.exists(job.file_path or "/nonexistent") and job.file_path == ""
        import_job_run(job_id=job.pk)  # a redelivered task finds the job taken
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 1

    def test_a_failing_job_records_the_line_and_stores_nothing(self):
        job = import_job_run(job_id=self.job_for(self.data.replace(b'"Mine"', b"7")).pk)
        assert job.status == "failed" and job.error["line"] == 4 and job.error["code"] == "invalid_import"
        assert not Thread.objects.filter(workspace=self.other_workspace).exists()


class CommandTests(MemoryTestCase):
    def test_export_then_import_through_the_commands(self):
        thread_create(workspace=self.workspace, agent=self.agent, title="Mine")
        target = workspace_create(name="Target")
        path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "out.jsonl")
        call_command("export_memory", workspace="Acme", output=path, history=True, no_progress=True)
        with open(path, "rb") as f:
            data = f.read()
        out = io.StringIO()
        call_command(
            "import_memory", path, workspace=str(target.pk), dry_run=True, no_progress=True, stdout=out
        )
        assert json.loads(out.getvalue())["created"]["thread"] == 1
        assert not Thread.objects.filter(workspace=target).exists()
        call_command("import_memory", path, workspace="Target", no_progress=True, stdout=io.StringIO())
        assert normalized(export_bytes(Scope(workspace=target, history=True)))[1:-1] != []
        assert Thread.objects.filter(workspace=target).count() == 1
        assert data.startswith(b'{"format":"memory-export"')

    def test_errors_are_command_errors(self):
        with self.assertRaisesMessage(CommandError, "No workspace"):
            call_command("export_memory", workspace="Nope", no_progress=True)
        path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "bad.jsonl")
        with open(path, "wb") as f:
            f.write(b"not json\n")
        with self.assertRaisesMessage(CommandError, "nothing was imported"):
            call_command("import_memory", path, workspace="Acme", no_progress=True, stdout=io.StringIO())


class CacheDownTests(JobCase):
    """An import's progress lives in the cache (Valkey); the cache being down must cost only
    the live progress, not the import or the status request."""

    def test_a_job_runs_to_the_end_while_the_cache_is_down(self):
        """Before: the first progress report raised, and the import was rolled back as
        `import_stopped`."""
        job = self.job_for(self.data)
        with cache_down(), self.assertLogs("portability.services.jobs", "WARNING"):
            job = import_job_run(job_id=job.pk)
        assert job.status == "done", job.error
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 1

    def test_a_running_jobs_progress_falls_back_to_its_row(self):
        """Before: a 500 for the job's status while it ran."""
        job = self.job_for(self.data)
        ImportJob.objects.filter(pk=job.pk).update(
            status=ImportJob.Status.RUNNING, bytes_done=10, lines_done=1
        )
        job.refresh_from_db()
        with cache_down(), self.assertLogs("portability.services.jobs", "WARNING"):
            progress = import_job_progress(job)
        assert (progress["done"], progress["lines"]) == (10, 1)
