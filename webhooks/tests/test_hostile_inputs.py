"""Hostile input on every webhooks route: a 4xx with a machine-readable error, never a 500."""

from django.test import override_settings

from core.testing import MemoryTestCase

LIST = "/api/v1/webhooks/"


class HostileInputTests(MemoryTestCase):
    def setUp(self):
        response = self.api().post(LIST, {"url": "https://example.com/hook"}, format="json")
        self.detail = f"{LIST}{response.json()['id']}/"

    def assert_refused(self, response, label):
        assert 400 <= response.status_code < 500, (label, response.status_code, response.content[:300])
        assert "error" in response.json(), (label, response.content[:300])

    def test_malformed_bodies_and_parameters_are_4xx(self):
        api = self.api()
        cases = [
            ("post list", lambda: api.post(LIST, [1, 2], format="json")),
            (
                "post null events",
                lambda: api.post(LIST, {"url": "https://e.com/", "events": [None]}, format="json"),
            ),
            (
                "post int events",
                lambda: api.post(LIST, {"url": "https://e.com/", "events": [1]}, format="json"),
            ),
            ("post dict url", lambda: api.post(LIST, {"url": {"a": 1}}, format="json")),
            ("post bad json", lambda: api.generic("POST", LIST, "{", content_type="application/json")),
            ("post nul url", lambda: api.post(LIST, {"url": "https://e.com/\x00"}, format="json")),
            ("post ipv6 broken", lambda: api.post(LIST, {"url": "http://[::1/"}, format="json")),
            (
                "post long desc",
                lambda: api.post(LIST, {"url": "https://e.com/", "description": "x" * 201}, format="json"),
            ),
            ("patch list", lambda: api.patch(self.detail, [1], format="json")),
            ("patch null url", lambda: api.patch(self.detail, {"url": None}, format="json")),
            ("patch events str", lambda: api.patch(self.detail, {"events": "fact.created"}, format="json")),
            ("patch unknown", lambda: api.patch(self.detail, {"secret_encrypted": "x"}, format="json")),
            (
                "deliveries dates",
                lambda: api.get(f"{self.detail}deliveries/", {"created_after": "yesterday"}),
            ),
            (
                "deliveries limit",
                lambda: api.get(f"{self.detail}deliveries/", {"limit": "abc", "offset": "-5"}),
            ),
            ("deliveries type", lambda: api.get(f"{self.detail}deliveries/", {"event_type": "x" * 5000})),
            ("bad uuid", lambda: api.get(f"{LIST}not-a-uuid/")),
            ("missing", lambda: api.post(f"{LIST}00000000-0000-0000-0000-000000000000/ping/")),
            ("rotate get", lambda: api.get(f"{self.detail}rotate-secret/")),
        ]
        for label, call in cases:
            response = call()
            if label == "bad uuid":
                assert response.status_code == 404, label
                continue
            if label == "deliveries limit" and response.status_code == 200:
                continue
            self.assert_refused(response, label)

    @override_settings(WEBHOOKS_ALLOW_PRIVATE_URLS=False)
    def test_odd_urls_are_refused_with_the_field_named(self):
        for url in (
            "http://example.com:99999/hook",
            "http://[fe80::1%25eth0]/",
            "http://a..b/",
            "http://" + "a" * 64 + ".com/",
            "http://xn--a.com/",
        ):
            response = self.api().post(LIST, {"url": url}, format="json")
            self.assert_refused(response, url)
            response = self.api().patch(self.detail, {"url": url}, format="json")
            self.assert_refused(response, url)
