from django.test import override_settings

from core.testing import MemoryTestCase


class ApiConventionTests(MemoryTestCase):
    @override_settings(API_MAX_BODY_BYTES=100)
    def test_oversized_body_is_413(self):
        response = self.api().post("/api/v1/agents/", {"slug": "x" * 200}, format="json")
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"

    def test_unknown_api_path_is_json_404(self):
        response = self.api().get("/api/v1/nothing-here/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"

    def test_throttled_key_gets_429_with_retry_after(self):
        from rest_framework.settings import api_settings

        from core.throttling import ApiKeyRateThrottle

        original = ApiKeyRateThrottle.THROTTLE_RATES
        ApiKeyRateThrottle.THROTTLE_RATES = {**api_settings.DEFAULT_THROTTLE_RATES, "api_key": "2/min"}
        try:
            client = self.api()
            assert client.get("/api/v1/agents/").status_code == 200
            assert client.get("/api/v1/agents/").status_code == 200
            response = client.get("/api/v1/agents/")
            assert response.status_code == 429
            assert response.json()["error"]["code"] == "throttled"
            assert int(response["Retry-After"]) > 0
            # Another key has its own budget.
            assert self.api(self.agent_key).get("/api/v1/agents/").status_code == 200
        finally:
            ApiKeyRateThrottle.THROTTLE_RATES = original

    def test_schema_and_docs_are_served_without_a_cdn(self):
        schema = self.client.get("/api/schema/")
        assert schema.status_code == 200
        assert b"/api/v1/agents/" in schema.content
        docs = self.client.get("/api/docs/")
        assert docs.status_code == 200
        assert b"cdn" not in docs.content.lower()
        assert b"/static/drf_spectacular_sidecar/" in docs.content
