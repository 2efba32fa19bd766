"""The client's verifier accepts exactly what the server signs (two copies of one rule: the
client is installed without the server)."""

from memory_client.webhooks import signature_verify
from webhooks.signing import secret_generate, signature_header


def test_the_client_verifies_what_the_server_signs():
    secret = secret_generate()
    body = b'{"id":"evt_1","type":"fact.created"}'
    header = signature_header(secret=secret, body=body, timestamp=1_700_000_000)
    assert signature_verify(secret=secret, header=header, body=body, now=1_700_000_100)
    assert not signature_verify(secret=secret, header=header, body=body + b" ", now=1_700_000_100)
    assert not signature_verify(secret=secret, header=header, body=body, now=1_700_000_400)
    assert not signature_verify(secret="whsec_other", header=header, body=body, now=1_700_000_000)
    assert not signature_verify(secret=secret, header="t=abc", body=body)
