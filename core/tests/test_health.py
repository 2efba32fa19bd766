from django.utils import timezone

from core.models import WorkerHeartbeat
from core.testing import MemoryTestCase


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
