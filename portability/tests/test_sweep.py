"""A worker that dies under an import job: its heartbeat goes stale, the sweep queues the job
again once, then fails it; the API and the /memories page show why."""

import os
import shutil
import tempfile
import threading
import time
from datetime import timedelta

import psycopg
from django.test import TransactionTestCase
from django.urls import reverse
from django.utils import timezone

from core.lib.beat import lock_connection_params
from core.services import workspace_create
from core.testing import MemoryTestCase
from portability.models import ImportJob
from portability.registry import Scope
from portability.services import import_job_create, import_jobs_sweep, import_upload_path
from portability.services.jobs import JOB_LOCK_CLASS, _Heartbeat
from portability.tests.helpers import export_bytes
from threads.models import Thread
from threads.services import thread_create


class SweepTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        thread_create(workspace=cls.workspace, agent=cls.agent, title="Mine")
        cls.data = export_bytes(Scope(workspace=cls.workspace))

    def setUp(self):
        super().setUp()
        self.import_dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.import_dir, True)
        override = self.settings(PORTABILITY_IMPORT_DIR=self.import_dir, PORTABILITY_IMPORT_STALE_SECONDS=300)
        override.enable()
        self.addCleanup(override.disable)

    def died_running(self, *, attempts=1, beat_seconds_ago=600, file=True) -> ImportJob:
        """A job a worker claimed and then died under: running, its last beat long ago, its
        file still there (the worker never reached its cleanup)."""
        path = import_upload_path()
        with open(path, "wb") as f:
            f.write(self.data)
        job = import_job_create(
            workspace=self.other_workspace,
            actor="key:test",
            file_name="acme.jsonl",
            file_path=path,
            bytes_total=len(self.data),
        )
        beat = timezone.now() - timedelta(seconds=beat_seconds_ago)
        ImportJob.objects.filter(pk=job.pk).update(
            status=ImportJob.Status.RUNNING, attempts=attempts, started_at=beat, heartbeat_at=beat
        )
        if not file:
            os.remove(path)
        return job

    def test_a_stale_job_is_queued_again_once_and_runs(self):
        job = self.died_running()
        with self.captureOnCommitCallbacks(execute=True):
            counts = import_jobs_sweep()
        assert counts["requeued"] == 1 and counts["failed"] == 0
        job.refresh_from_db()
        assert job.status == "done" and job.attempts == 2, (job.status, job.error)
        assert job.report["created"]["thread"] == 1
        assert Thread.objects.filter(workspace=self.other_workspace).count() == 1
        assert os.listdir(self.import_dir) == []

    def test_a_queued_job_no_worker_took_is_sent_again_once_per_interval(self):
        """The broker lost its message (restarted without its data): the job still runs."""
        from django.core.cache import cache

        from portability.services.jobs import RESENT_KEY

        job = self.died_running()
        ImportJob.objects.filter(pk=job.pk).update(
            status=ImportJob.Status.QUEUED,
            attempts=0,
            started_at=None,
            heartbeat_at=None,
            created_at=timezone.now() - timedelta(seconds=600),
        )
        self.addCleanup(cache.delete, RESENT_KEY.format(job_id=job.pk))
        fresh = import_job_create(
            workspace=self.other_workspace, actor="t", file_name="new.jsonl", file_path="", bytes_total=0
        )
        counts = import_jobs_sweep()
        assert counts["resent"] == 1
        job.refresh_from_db()
        assert job.status == "done", (job.status, job.error)
        assert job.report["created"]["thread"] == 1
        fresh.refresh_from_db()
        assert fresh.status == "queued"  # just queued: its message is presumably on its way

        ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.QUEUED, started_at=None)
        assert import_jobs_sweep()["resent"] == 0  # not again within the interval

    def test_a_job_whose_worker_died_twice_fails_with_worker_lost(self):
        job = self.died_running(attempts=2)
        with self.captureOnCommitCallbacks(execute=True):
            counts = import_jobs_sweep()
        assert counts["failed"] == 1 and counts["requeued"] == 0
        job.refresh_from_db()
        assert job.status == "failed" and job.finished_at is not None and job.file_path == ""
        assert job.error["code"] == "worker_lost"
        assert "upload the file again" in job.error["message"]
        assert os.listdir(self.import_dir) == []
        assert not Thread.objects.filter(workspace=self.other_workspace).exists()
        # The API and the Export/Import page say so.
        response = self.client.get(
            reverse("api:portability:import-detail", kwargs={"job_id": job.pk}),
            HTTP_AUTHORIZATION=f"Bearer {self.outsider_key}",
        )
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "failed" and body["error"]["code"] == "worker_lost"
        assert body["progress"]["percent"] == 0
        self.client.force_login(self.outsider)
        page = self.client.get(
            reverse(
                "memories:portability-job",
                kwargs={"workspace_id": self.other_workspace.pk, "job_id": job.pk},
            )
        )
        assert page.status_code == 200
        assert b"The worker running this import stopped" in page.content
        assert b"Nothing was imported." in page.content
        # Another sweep finds nothing more to do.
        assert import_jobs_sweep()["failed"] == 0

    def test_a_stale_job_without_its_file_fails_at_once(self):
        job = self.died_running(file=False)
        with self.captureOnCommitCallbacks(execute=True):
            assert import_jobs_sweep()["failed"] == 1
        job.refresh_from_db()
        assert job.status == "failed" and job.error["code"] == "worker_lost"

    def test_a_fresh_heartbeat_and_other_states_are_left_alone(self):
        fresh = self.died_running(beat_seconds_ago=10)
        queued = import_job_create(
            workspace=self.other_workspace, actor="t", file_name="q", file_path="", bytes_total=0
        )
        with self.captureOnCommitCallbacks(execute=True):
            counts = import_jobs_sweep()
        assert counts == {"requeued": 0, "failed": 0, "alive": 0, "resent": 0, "files_removed": 0}
        fresh.refresh_from_db()
        queued.refresh_from_db()
        assert fresh.status == "running" and queued.status == "queued"

    def test_a_stale_job_whose_transaction_is_still_open_is_left_alone(self):
        """A worker that stopped beating but still holds its import's transaction (and so its
        lock) may yet commit: the sweep does not run or fail it under that worker."""
        job = self.died_running()
        params = lock_connection_params()
        with psycopg.connect(**params, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s::int, hashtext(%s))", [JOB_LOCK_CLASS, str(job.pk)])
            with self.captureOnCommitCallbacks(execute=True):
                counts = import_jobs_sweep()
        assert counts["alive"] == 1 and counts["requeued"] == 0 and counts["failed"] == 0
        job.refresh_from_db()
        assert job.status == "running"

    def test_upload_files_no_job_names_are_removed_after_a_day(self):
        named = self.died_running(beat_seconds_ago=10).file_path
        orphan = import_upload_path()
        recent = import_upload_path()
        for path in (orphan, recent):
            with open(path, "wb") as f:
                f.write(b"x")
        old = time.time() - 2 * 24 * 3600
        os.utime(orphan, (old, old))
        os.utime(named, (old, old))
        assert import_jobs_sweep()["files_removed"] == 1
        assert not os.path.exists(orphan)
        assert os.path.exists(recent) and os.path.exists(named)


class HeartbeatTests(TransactionTestCase):
    """The heartbeat is written from its own thread and connection, visible to others while
    the import's transaction is still open."""

    def test_the_heartbeat_moves_while_the_job_runs(self):
        workspace = workspace_create(name="Beat")
        job = ImportJob.objects.create(workspace=workspace, status=ImportJob.Status.RUNNING)
        seen = []
        with self.settings(PORTABILITY_IMPORT_HEARTBEAT_SECONDS=0.05), _Heartbeat(job.pk):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and len(set(seen)) < 3:
                seen.append(ImportJob.objects.get(pk=job.pk).heartbeat_at)
                time.sleep(0.05)
        beats = {s for s in seen if s is not None}
        assert len(beats) >= 2, seen
        stopped = ImportJob.objects.get(pk=job.pk).heartbeat_at
        time.sleep(0.2)
        assert ImportJob.objects.get(pk=job.pk).heartbeat_at == stopped
        assert not [t for t in threading.enumerate() if t.name.startswith("import-heartbeat-")]
