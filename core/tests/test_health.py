import contextlib
import json
import runpy
import threading
from unittest import mock

from celery.signals import worker_process_init
from django.conf import settings
from django.test import SimpleTestCase
from django.utils import timezone

from core.lib import warmup
from core.models import WorkerHeartbeat
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer


class HealthTests(MemoryTestCase):
    def test_healthz(self):
        response = self.client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}

    def test_readyz_without_a_worker_heartbeat_is_503(self):
        response = self.client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["checks"]["database"]["ok"] is True
        assert body["checks"]["worker"]["ok"] is False

    def test_readyz_reports_the_worker(self):
        WorkerHeartbeat.objects.create(worker="worker@test", beat_at=timezone.now())
        body = self.client.get("/readyz").json()
        assert body["checks"]["worker"]["ok"] is True
        assert body["checks"]["worker"]["worker"] == "worker@test"


class WarmUpReadinessTests(MemoryTestCase):
    """A process answers /readyz 503 "warming" until its models are loaded (issue 18)."""

    def setUp(self):
        WorkerHeartbeat.objects.create(worker="worker@test", beat_at=timezone.now())
        # warm-up state is per process: give every test a process that has not warmed yet.
        self.addCleanup(_warmup_forget)
        _warmup_forget()

    def test_a_process_that_never_warms_is_not_held_back(self):
        response = self.client.get("/readyz")
        assert response.status_code == 200
        assert response.json()["checks"]["warmup"] == {"ok": True, "status": "not_started"}

    @contextlib.contextmanager
    def warming(self):
        """This process warming up, its model load held until the block ends."""
        loading = threading.Event()
        loaded = threading.Event()

        def slow_model(text):
            loading.set()
            loaded.wait(10)
            return {"provider": "local", "model": "all-MiniLM-L6-v2"}

        with mock.patch("core.embeddings.embedding_warm", slow_model):
            thread = warmup.warmup_start()
            assert loading.wait(30)
            try:
                yield
            finally:
                loaded.set()
                thread.join(30)

    def test_warming_answers_503_with_a_reason_until_loaded(self):
        with self.warming():
            response = self.client.get("/readyz")
            assert response.status_code == 503
            body = response.json()
            assert body["status"] == "unready"
            assert body["reasons"] == ["warming"]
            assert body["checks"]["warmup"]["status"] == "warming"
            # A second start in the same process does not warm twice.
            assert warmup.warmup_start() is None

        response = self.client.get("/readyz")
        assert response.status_code == 200
        check = response.json()["checks"]["warmup"]
        assert check["status"] == "ready"
        assert set(check["steps_ms"]) == {"urls", "database", "tokens", "embeddings"}
        assert check["embeddings"] == {"provider": "local", "model": "all-MiniLM-L6-v2"}

    def test_a_stack_starting_logs_no_error_while_its_process_warms(self):
        # Seen on every `scripts/run`: the first /readyz poll found the process warming and the
        # worker not yet beating, and django.request logged it as an ERROR.
        WorkerHeartbeat.objects.all().delete()
        with self.warming(), self.assertNoLogs("django.request"):
            response = self.client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["reasons"] == ["warming", "no_worker_heartbeat"]

        # Warm, a missing worker is a fault worth the log.
        with self.assertLogs("django.request", level="ERROR"):
            response = self.client.get("/readyz")
        assert response.json()["reasons"] == ["no_worker_heartbeat"]

    def test_a_failed_warm_up_is_503_with_its_error(self):
        with mock.patch("core.lib.tokens.count_tokens", side_effect=RuntimeError("encoding missing")):
            warmup.warmup_start(background=False)
        response = self.client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["reasons"] == ["warmup_failed"]
        assert "encoding missing" in body["checks"]["warmup"]["error"]

    def test_the_local_model_is_loaded_and_run_once(self):
        with mock.patch("core.embeddings.LocalEmbeddingProvider.embed", return_value=[[0.0] * 384]) as embed:
            warmup.warmup_start(background=False)
        embed.assert_called_once()
        assert self.client.get("/readyz").status_code == 200

    def test_an_embedding_endpoint_that_is_down_is_called_once_and_reported(self):
        with OpenAITestServer() as endpoint:
            endpoint.fail_next = 5
            with self.settings(EMBEDDING_BASE_URL=endpoint.url, EMBEDDING_MODEL="text-embedding-3-small"):
                warmup.warmup_start(background=False)
                response = self.client.get("/readyz")
        assert len(endpoint.requests) == 1
        assert response.status_code == 200
        body = response.json()
        assert body["warnings"] == ["embedding_endpoint_unreachable"]
        embeddings = body["checks"]["warmup"]["embeddings"]
        assert embeddings["provider"] == "openai" and embeddings["reachable"] is False

    def test_an_embedding_endpoint_that_answers_is_called_once(self):
        with OpenAITestServer() as endpoint:
            endpoint.embedding_handler = lambda texts: [[1.0, 0.0] for _ in texts]
            with self.settings(EMBEDDING_BASE_URL=endpoint.url, EMBEDDING_MODEL="text-embedding-3-small"):
                warmup.warmup_start(background=False)
                body = self.client.get("/readyz").json()
        assert [path for path, _ in endpoint.requests] == ["/v1/embeddings"]
        assert "warnings" not in body
        assert body["checks"]["warmup"]["embeddings"]["reachable"] is True

    def test_gunicorn_workers_and_celery_pool_processes_start_the_warm_up(self):
        hooks = runpy.run_path(str(settings.BASE_DIR / "memory_project" / "gunicorn.conf.py"))
        with mock.patch("core.lib.warmup._warm") as warm:
            hooks["post_worker_init"](worker=None)
            _join_warmup_threads()
            assert warm.call_count == 1
            # Web processes freeze what is alive once warm (full collections stay short).
            assert warm.call_args.kwargs == {"freeze": True}
            _warmup_forget()
            worker_process_init.send(sender=None)
            _join_warmup_threads()
            assert warm.call_count == 2


class WarmupFreezeTests(SimpleTestCase):
    def test_a_frozen_warm_up_moves_what_is_alive_out_of_the_collectors_generations(self):
        _warmup_forget()
        self.addCleanup(_warmup_forget)
        steps = {
            name: mock.patch(f"core.lib.warmup.{name}", return_value=None)
            for name in ("_urls", "_database", "_tokens", "_embeddings")
        }
        for patcher in steps.values():
            patcher.start()
            self.addCleanup(patcher.stop)
        with mock.patch("gc.freeze") as freeze:
            warmup.warmup_start(background=False)
            assert freeze.call_count == 0
            _warmup_forget()
            warmup.warmup_start(background=False, freeze=True)
            assert freeze.call_count == 1
        assert warmup.warmup_status()["status"] == warmup.READY


def _warmup_forget() -> None:
    with warmup._lock:
        warmup._state.clear()
        warmup._state.update(pid=None, status=warmup.NOT_STARTED)


def _join_warmup_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "warmup":
            thread.join(30)


def test_serve_and_the_image_start_gunicorn_with_the_warm_up_hooks():
    """Both ways the project runs gunicorn pass memory_project/gunicorn.conf.py."""
    from core.management.commands.serve import Command

    options = {"host": "127.0.0.1", "port": 8000, "mcp_port": 0, "web_workers": 2}
    options |= {"worker_concurrency": 2, "keep_alive": 30}
    (web,) = [spec for spec in Command()._children(options, {}) if spec.name == "web"]
    config = settings.BASE_DIR / "memory_project" / "gunicorn.conf.py"
    assert f"--config={config}" in web.command
    dockerfile = (settings.BASE_DIR / "Dockerfile").read_text()
    (cmd,) = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert "--config=/app/memory_project/gunicorn.conf.py" in json.loads(cmd[4:])
