"""A real Celery worker process on a real (embedded Valkey) broker and the test database."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import transaction
from django.test import TransactionTestCase

from core.lib.embedded import EmbeddedValkey
from core.models import WorkerHeartbeat
from core.tasks import worker_heartbeat_task
from core.testing import celery_broker, database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
class RealWorkerTests(TransactionTestCase):
    def setUp(self):
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="memory-test-valkey-"))
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        self.valkey = EmbeddedValkey(root, root / "v.sock")
        self.valkey.start()
        self.addCleanup(self.valkey.stop)
        self.worker_log = open(root / "worker.log", "w+")  # noqa: SIM115 - closed in cleanup
        self.addCleanup(self.worker_log.close)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memory_project.settings.development",
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": self.valkey.url,
            "MEMORY_VAR_DIR": str(root),
        }
        self.worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "memory_project",
                "worker",
                "--pool=solo",
                "--loglevel=WARNING",
                "--hostname=test-worker@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.worker_log,
            stderr=subprocess.STDOUT,
        )
        self.addCleanup(self._stop_worker)
        self.enterContext(celery_broker(self.valkey.url))

    def _stop_worker(self):
        self.worker.terminate()
        try:
            self.worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.worker.kill()
            self.worker.wait()

    def _worker_output(self) -> str:
        self.worker_log.flush()
        self.worker_log.seek(0)
        return self.worker_log.read()[-3000:]

    def _wait_for(self, worker_name: str, timeout: float = 90.0) -> WorkerHeartbeat | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            beat = WorkerHeartbeat.objects.filter(worker=worker_name).first()
            if beat is not None:
                return beat
            time.sleep(0.2)
        return None

    def test_task_enqueued_on_commit_runs_in_the_worker(self):
        with transaction.atomic():
            worker_heartbeat_task.delay_on_commit(worker="enqueued-on-commit")
            # Nothing leaves for the broker before the transaction commits.
            assert self.valkey.ping()
            time.sleep(0.5)
            assert not WorkerHeartbeat.objects.filter(worker="enqueued-on-commit").exists()
        assert self._wait_for("enqueued-on-commit") is not None, self._worker_output()

    def test_rolled_back_transaction_enqueues_nothing(self):
        try:
            with transaction.atomic():
                worker_heartbeat_task.delay_on_commit(worker="rolled-back")
                raise RuntimeError("abort")
        except RuntimeError:
            pass
        worker_heartbeat_task.delay_on_commit(worker="after-rollback")
        assert self._wait_for("after-rollback") is not None, self._worker_output()
        assert not WorkerHeartbeat.objects.filter(worker="rolled-back").exists()
