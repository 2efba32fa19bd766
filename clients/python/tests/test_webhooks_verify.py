"""The client's verifier accepts exactly what the server signs (two copies of one rule: the
client is installed without the server)."""

import json

import pytest

from memory_client.webhooks import (
    BODY_INVALID,
    DELIVERY_ID_FIELD,
    SIGNATURE_INVALID,
    WebhookVerificationError,
    event_verify,
    signature_verify,
)
from webhooks.events import DELIVERY_ID_FIELD as SERVER_DELIVERY_ID_FIELD
from webhooks.events import delivery_payload
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


def _signed(secret, payload, timestamp=1_700_000_000):
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return body, signature_header(secret=secret, body=body, timestamp=timestamp)


def test_event_verify_answers_the_signed_delivery_id_the_server_sends():
    assert DELIVERY_ID_FIELD == SERVER_DELIVERY_ID_FIELD
    secret = secret_generate()
    payload = delivery_payload({"id": "evt_1", "type": "fact.created"}, delivery_id="d-1")
    body, header = _signed(secret, payload)
    event = event_verify(secret=secret, header=header, body=body, now=1_700_000_000)
    assert (event["id"], event[DELIVERY_ID_FIELD]) == ("evt_1", "d-1")


def test_event_verify_refuses_a_changed_delivery_id_or_an_unsigned_body():
    secret = secret_generate()
    body, header = _signed(secret, {"id": "evt_1", DELIVERY_ID_FIELD: "d-1"})
    replayed = body.replace(b"d-1", b"d-2")
    with pytest.raises(WebhookVerificationError, match=SIGNATURE_INVALID):
        event_verify(secret=secret, header=header, body=replayed, now=1_700_000_000)
    with pytest.raises(WebhookVerificationError, match=SIGNATURE_INVALID):
        event_verify(secret=secret, header=header, body=body, now=1_700_000_400)
    for payload in ([1, 2], {"id": "evt_1"}, {"id": "evt_1", DELIVERY_ID_FIELD: 5}):
        body, header = _signed(secret, payload)
        with pytest.raises(WebhookVerificationError, match=BODY_INVALID):
            event_verify(secret=secret, header=header, body=body, now=1_700_000_000)
    header = signature_header(secret=secret, body=b"not json", timestamp=1_700_000_000)
    with pytest.raises(WebhookVerificationError, match=BODY_INVALID):
        event_verify(secret=secret, header=header, body=b"not json", now=1_700_000_000)
