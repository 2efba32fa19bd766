"""HTTPS to the pinned address against a real TLS server: the connection goes to the checked
address while SNI, the certificate check and Host carry the URL's name, and a certificate for
another name is a failed attempt, also when a connection to that address is already open."""

import datetime
import json
import os
import socket
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.test import override_settings

from core.access import principal_for_api_key
from core.testing import MemoryTestCase
from webhooks.models import WebhookDelivery
from webhooks.services import webhook_deliver, webhook_subscription_create

HOST = "hooks.example.test"
OTHER_HOST = "other.example.test"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class PrivateCA:
    """A certificate authority made for one test run, and leaf certificates it signs."""

    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("memory-server test CA"))
            .issuer_name(_name("memory-server test CA"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def leaf(self, *names: str) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) valid for `names`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(names[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _pem(key)


class TLSReceiver:
    """An HTTPS webhook receiver on 127.0.0.1 that keeps connections open (HTTP/1.1, like
    most receivers) and records each request with the SNI name its connection asked for."""

    def __init__(self, cert_pem: bytes, key_pem: bytes):
        self.requests: list[dict] = []
        self.sni: list[str | None] = []
        self.handshake_failures = 0
        receiver = self

        with tempfile.TemporaryDirectory() as folder:
            cert_path, key_path = Path(folder, "cert.pem"), Path(folder, "key.pem")
            cert_path.write_bytes(cert_pem)
            key_path.write_bytes(key_pem)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert_path, key_path)

        def sni_seen(ssl_socket, server_name, ssl_context):
            receiver.sni.append(server_name)

        context.sni_callback = sni_seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                try:
                    self.request.do_handshake()
                except (ssl.SSLError, OSError):
                    receiver.handshake_failures += 1
                    raise
                super().setup()

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                connection, address = self.socket.accept()
                # The handshake runs in the request's thread (Handler.setup), so a client that
                # refuses the certificate never stalls the accepting loop.
                wrapped = context.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
                return wrapped, address

            def handle_error(self, request, client_address):
                pass  # a refused handshake: counted in Handler.setup

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _resolver(names: dict[str, str]):
    """getaddrinfo answering the given names with their address; others resolve as usual."""
    real = socket.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        if host in names:
            family = socket.AF_INET6 if ":" in names[host] else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (names[host], port or 0))]
        return real(host, port, *args, **kwargs)

    return resolve


# Pinning happens only when private addresses are refused (webhook_url_check), so the tests
# refuse them and let 127.0.0.1 pass as public, the way test_ssrf.py does.
class PinnedTLSSetup:
    """A test case's fixtures for deliveries to a TLSReceiver: the CA, its trust, and `names`
    resolved to the receiver's address."""

    names = {HOST: "127.0.0.1", OTHER_HOST: "127.0.0.1"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ca = PrivateCA()

    def setUp(self):
        self.principal = principal_for_api_key(self.owner_api_key)
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        ca_file = Path(folder.name, "ca.pem")
        ca_file.write_text(self.ca.pem())
        # The HTTP clients trust this run's CA (and nothing else) the way an operator's would
        # trust a private one: SSL_CERT_FILE, read when a client is built. The cached clients
        # are set aside, so the ones built here are the code's own, with that trust.
        for patcher in (
            mock.patch.dict(os.environ, {"SSL_CERT_FILE": str(ca_file)}),
            mock.patch("core.lib.http._client", None),
            mock.patch.dict("core.lib.addresses._pinned_clients", clear=True),
            mock.patch("core.lib.addresses._pinned_ssl_context", None),
            mock.patch("webhooks.services.subscriptions.address_public", return_value=True),
            mock.patch("socket.getaddrinfo", side_effect=_resolver(self.names)),
        ):
            patcher.start()
            self.addCleanup(patcher.stop)
        self.addCleanup(self._clients_close)

    def _clients_close(self):
        from core.lib import addresses, http

        for client in (http._client, *addresses._pinned_clients.values()):
            if client is not None:
                client.close()

    def _deliver(self, url: str) -> WebhookDelivery:
        subscription, _ = webhook_subscription_create(principal=self.principal, url=url)
        row = WebhookDelivery.objects.create(
            subscription=subscription,
            event_id="evt_1",
            event_type="fact.created",
            payload={"id": "evt_1", "type": "fact.created"},
        )
        return webhook_deliver(delivery_id=row.pk)


@override_settings(WEBHOOKS_ALLOW_PRIVATE_URLS=False, WEBHOOKS_TIMEOUT_SECONDS=5)
class PinnedTLSTests(PinnedTLSSetup, MemoryTestCase):
    def test_https_to_the_pinned_address_carries_the_name_in_sni_host_and_certificate_check(self):
        with TLSReceiver(*self.ca.leaf(HOST)) as receiver:
            delivery = self._deliver(f"https://{HOST}:{receiver.port}/hook?x=1")
        assert (delivery.status, delivery.response_status, delivery.last_error) == ("succeeded", 200, "")
        [request] = receiver.requests
        assert request["path"] == "/hook?x=1"
        assert request["headers"]["Host"] == f"{HOST}:{receiver.port}"
        assert receiver.sni == [HOST]

    def test_a_certificate_for_another_name_is_a_failed_attempt(self):
        with TLSReceiver(*self.ca.leaf(OTHER_HOST)) as receiver:
            delivery = self._deliver(f"https://{HOST}:{receiver.port}/hook")
        assert receiver.requests == []
        assert receiver.sni == [HOST]
        assert (delivery.status, delivery.attempts, delivery.response_status) == ("retrying", 1, None)
        assert "CERTIFICATE_VERIFY_FAILED" in delivery.last_error, delivery.last_error

    def test_an_open_connection_to_the_address_is_not_reused_for_a_name_its_certificate_lacks(self):
        """A second name pointed at the same address (its owner's DNS, nothing more) must pass
        its own certificate check, not ride a connection verified for the first name."""
        with TLSReceiver(*self.ca.leaf(HOST)) as receiver:
            first = self._deliver(f"https://{HOST}:{receiver.port}/hook")
            second = self._deliver(f"https://{OTHER_HOST}:{receiver.port}/hook")
        assert first.status == "succeeded"
        assert [request["headers"]["Host"] for request in receiver.requests] == [f"{HOST}:{receiver.port}"]
        assert second.status == "retrying"
        assert "CERTIFICATE_VERIFY_FAILED" in second.last_error, second.last_error

    def test_deliveries_to_one_name_succeed_one_after_another(self):
        with TLSReceiver(*self.ca.leaf(HOST)) as receiver:
            deliveries = [self._deliver(f"https://{HOST}:{receiver.port}/hook/{n}") for n in range(3)]
        assert [delivery.status for delivery in deliveries] == ["succeeded"] * 3
        assert [request["path"] for request in receiver.requests] == ["/hook/0", "/hook/1", "/hook/2"]
        assert set(receiver.sni) == {HOST}
