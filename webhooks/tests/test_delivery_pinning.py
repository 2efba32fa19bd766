"""Pinned HTTPS deliveries to names written in the forms a valid URL allows (a trailing dot,
capitals, a non-ASCII name), and with an HTTP proxy set in the environment: each reaches the
checked address and passes the certificate check for its name."""

import os
from unittest import mock

from django.test import override_settings

from core.testing import MemoryTestCase
from webhooks.tests.test_delivery_tls import HOST, PinnedTLSSetup, TLSReceiver

# "ß" is where the two IDNA standards part: IDNA 2003 (Python's socket and "idna" codec)
# maps it to "ss", IDNA 2008 (httpx, browsers, the certificate) keeps it as a letter.
IDN_HOST = "faß.example.test"
IDN_ASCII = "xn--fa-hia.example.test"


@override_settings(WEBHOOKS_ALLOW_PRIVATE_URLS=False, WEBHOOKS_TIMEOUT_SECONDS=5)
class PinnedNameFormsTests(PinnedTLSSetup, MemoryTestCase):
    names = {HOST: "127.0.0.1", f"{HOST}.": "127.0.0.1", IDN_ASCII: "127.0.0.1"}

    def test_a_name_with_a_trailing_dot_passes_the_certificate_check_for_its_name(self):
        with TLSReceiver(*self.ca.leaf(HOST)) as receiver:
            delivery = self._deliver(f"https://{HOST}.:{receiver.port}/hook")
        assert (delivery.status, delivery.last_error) == ("succeeded", "")
        assert receiver.sni == [HOST]

    def test_a_name_in_capitals_passes_the_certificate_check(self):
        with TLSReceiver(*self.ca.leaf(HOST)) as receiver:
            delivery = self._deliver(f"https://{HOST.upper()}:{receiver.port}/hook")
        assert (delivery.status, delivery.last_error) == ("succeeded", "")
        assert receiver.requests[0]["headers"]["Host"] == f"{HOST}:{receiver.port}"

    def test_an_international_name_is_looked_up_as_the_name_the_request_carries(self):
        """The check resolves the IDNA 2008 form that goes in Host, SNI and the certificate
        check, not the IDNA 2003 form of another name ("fass")."""
        with TLSReceiver(*self.ca.leaf(IDN_ASCII)) as receiver:
            delivery = self._deliver(f"https://{IDN_HOST}:{receiver.port}/hook")
        assert (delivery.status, delivery.last_error) == ("succeeded", "")
        assert receiver.sni == [IDN_ASCII]

    def test_a_proxy_in_the_environment_does_not_carry_a_pinned_delivery(self):
        """HTTPS_PROXY names a proxy that is not there: a pinned delivery connects to the
        address checked itself, and its TLS names the host, not the address."""
        proxy = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
        with mock.patch.dict(os.environ, proxy), TLSReceiver(*self.ca.leaf(HOST)) as receiver:
            for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
                os.environ.pop(name, None)
            delivery = self._deliver(f"https://{HOST}:{receiver.port}/hook")
        assert (delivery.status, delivery.last_error) == ("succeeded", "")
        assert receiver.sni == [HOST]
