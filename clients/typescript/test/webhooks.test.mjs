// The webhook verifier against a request the server signed (webhooks.signing.signature_header
// with the same secret, time and body), so the client follows the server's algorithm.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";

import { WebhookVerificationError, eventVerify, signatureVerify } from "../dist/index.js";

const SECRET = "whsec_test";
const TIME = 1764950400;
const BODY =
  '{"data":{"id":"f1","object":"fact"},"delivery_id":"c9d0e1f2-a3b4-4c5d-9e6f-7a8b9c0d1e2f","id":"evt_1","type":"fact.created"}';
// From the server: signature_header(secret="whsec_test", body=BODY, timestamp=TIME).
const HEADER = `t=${TIME},v1=22bb9796775155ef0226b03ca45a434199b294f999350c1c7db84827fe36bb94`;

function signed(body, time = TIME, secret = SECRET) {
  return `t=${time},v1=${createHmac("sha256", secret).update(`${time}.${body}`).digest("hex")}`;
}

test("a request the server signed verifies, from text or bytes, and answers its delivery id", async () => {
  for (const body of [BODY, new TextEncoder().encode(BODY)]) {
    assert.equal(await signatureVerify({ secret: SECRET, header: HEADER, body, now: TIME + 10 }), true);
    const event = await eventVerify({ secret: SECRET, header: HEADER, body, now: TIME + 10 });
    assert.equal(event.delivery_id, "c9d0e1f2-a3b4-4c5d-9e6f-7a8b9c0d1e2f");
    assert.equal(event.id, "evt_1");
  }
});

test("a changed body, delivery id, secret or time is refused", async () => {
  const forged = BODY.replace("c9d0e1f2", "00000000");
  const cases = [
    { header: HEADER, body: forged, now: TIME },
    { header: HEADER, body: BODY, now: TIME + 301 },
    { header: HEADER, body: BODY, now: TIME - 301 },
    { header: signed(BODY, TIME, "whsec_other"), body: BODY, now: TIME },
    { header: "", body: BODY, now: TIME },
    { header: `t=abc,v1=${HEADER.split("v1=")[1]}`, body: BODY, now: TIME },
    { header: `t=${TIME}`, body: BODY, now: TIME },
  ];
  for (const { header, body, now } of cases) {
    assert.equal(await signatureVerify({ secret: SECRET, header, body, now }), false, header);
    await assert.rejects(eventVerify({ secret: SECRET, header, body, now }), WebhookVerificationError);
  }
});

test("any of several v1 signatures may match, and a body without a delivery id is refused", async () => {
  const rotated = `${HEADER},v1=${"0".repeat(64)}`;
  assert.equal(await signatureVerify({ secret: SECRET, header: rotated, body: BODY, now: TIME }), true);
  for (const body of ['{"id":"evt_1"}', "[1]", "not json"]) {
    await assert.rejects(
      eventVerify({ secret: SECRET, header: signed(body), body, now: TIME }),
      (error) => error instanceof WebhookVerificationError && /delivery_id/.test(error.message),
    );
  }
});
