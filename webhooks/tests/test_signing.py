from django.test import SimpleTestCase

from webhooks.signing import secret_generate, signature_header, signature_verify


class SignatureTests(SimpleTestCase):
    def test_a_signed_body_verifies_within_the_tolerance_only(self):
        secret = secret_generate()
        body = b'{"type":"fact.created"}'
        header = signature_header(secret=secret, body=body, timestamp=1_000_000)
        assert signature_verify(secret=secret, header=header, body=body, now=1_000_000 + 299)
        assert not signature_verify(secret=secret, header=header, body=body, now=1_000_000 + 301)
        assert not signature_verify(secret=secret, header=header, body=body, now=1_000_000 - 301)

    def test_another_body_secret_or_a_malformed_header_fails(self):
        secret = secret_generate()
        body = b"{}"
        header = signature_header(secret=secret, body=body, timestamp=5)
        assert not signature_verify(secret=secret, header=header, body=b"{ }", now=5)
        assert not signature_verify(secret=secret_generate(), header=header, body=body, now=5)
        for bad in ("", "t=x,v1=00", "v1=00", "t=5", "t=5,v1=", "garbage"):
            assert not signature_verify(secret=secret, header=bad, body=body, now=5), bad

    def test_any_of_several_signatures_may_match(self):
        """During a rotation a receiver may be sent two; one matching is enough."""
        secret = secret_generate()
        header = signature_header(secret=secret, body=b"{}", timestamp=7)
        assert signature_verify(secret=secret, header=f"{header},v1=deadbeef", body=b"{}", now=7)
