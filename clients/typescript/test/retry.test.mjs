// Retries and error bodies against a tiny local HTTP server that answers from a script,
// so 429 and 503 with Retry-After can be produced on demand.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  MemoryClient,
  NotFoundError,
  RateLimitedError,
  ServerError,
  TransportError,
  ValidationError,
  parseRetryAfter,
} from "../dist/index.js";

/** Answers each request with the next scripted reply; the last one repeats. */
function scriptedServer() {
  const state = { replies: [], seen: [] };
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      state.seen.push({ method: req.method, url: req.url, body, at: Date.now(), headers: req.headers });
      const reply = state.replies[Math.min(state.seen.length - 1, state.replies.length - 1)];
      const headers = { "Content-Type": "application/json", ...reply.headers };
      res.writeHead(reply.status, headers);
      res.end(reply.body === undefined ? "" : typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body));
    });
  });
  return { server, state };
}

const errorBody = (code, message, fields = {}) => ({ error: { code, message, fields } });
const ok = (body) => ({ status: 200, body });

describe("retries and errors", () => {
  const { server, state } = scriptedServer();
  let baseUrl;

  before(async () => {
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    baseUrl = `http://127.0.0.1:${server.address().port}`;
  });
  after(() => new Promise((resolve) => server.close(resolve)));
  beforeEach(() => {
    state.seen.length = 0;
  });

  const client = (retry = {}) =>
    new MemoryClient({ baseUrl, apiKey: "mem_test", retry: { backoffMs: 1, maxBackoffMs: 5, ...retry } });

  test("429 is retried after Retry-After seconds, with the same body", async () => {
    state.replies = [
      { status: 429, headers: { "Retry-After": "1" }, body: errorBody("throttled", "Slow down.") },
      ok({ results: [], query: "tea" }),
    ];
    const started = Date.now();
    const found = await client().episodicEntries.search({ query: "tea" });
    assert.deepEqual(found, { results: [], query: "tea" });
    assert.equal(state.seen.length, 2);
    assert.ok(state.seen[1].at - state.seen[0].at >= 950, "waited for Retry-After");
    assert.ok(Date.now() - started < 5000);
    assert.equal(state.seen[0].body, state.seen[1].body);
    assert.equal(state.seen[0].headers.authorization, "Bearer mem_test");
    assert.equal(state.seen[0].url, "/api/v1/episodic-entries/search/");
  });

  test("503 is retried after a Retry-After HTTP date", async () => {
    const at = new Date(Date.now() + 2000).toUTCString(); // whole seconds: 1 to 2 s away
    state.replies = [{ status: 503, headers: { "Retry-After": at }, body: errorBody("unavailable", "Busy.") }, ok([])];
    const tools = await client().memory.tools();
    assert.deepEqual(tools, []);
    assert.equal(state.seen.length, 2);
    const waited = state.seen[1].at - state.seen[0].at;
    assert.ok(waited >= 900 && waited < 3000, `waited ${waited} ms`);
  });

  test("attempts are bounded, then the typed error carries the body", async () => {
    state.replies = [{ status: 503, body: errorBody("unavailable", "The database is restarting.") }];
    await assert.rejects(client({ maxAttempts: 3 }).memory.tools(), (error) => {
      assert.ok(error instanceof ServerError);
      assert.equal(error.status, 503);
      assert.equal(error.code, "unavailable");
      assert.equal(error.message, "The database is restarting.");
      return true;
    });
    assert.equal(state.seen.length, 3);
  });

  test("a POST that is not safe to repeat is not retried on 503, but is on 429", async () => {
    state.replies = [{ status: 503, body: errorBody("unavailable", "Busy.") }];
    const api = client().api;
    await assert.rejects(api.POST("/api/v1/facts/remember/", { body: { key: "k", value: "v", scope: "user" } }), ServerError);
    assert.equal(state.seen.length, 1);

    state.seen.length = 0;
    state.replies = [{ status: 429, headers: { "Retry-After": "0" }, body: errorBody("throttled", "Slow down.") }, ok({})];
    await api.POST("/api/v1/facts/remember/", { body: { key: "k", value: "v", scope: "user" } });
    assert.equal(state.seen.length, 2);
  });

  test("a retried append reuses the idempotency keys it generated", async () => {
    state.replies = [{ status: 502, body: "bad gateway" }, ok({ messages: [] })];
    await client().threads.appendMessages("t-1", [{ role: "user", content: "hello" }]);
    assert.equal(state.seen.length, 2);
    const [first, second] = state.seen.map((seen) => JSON.parse(seen.body));
    assert.ok(first.messages[0].idempotency_key);
    assert.deepEqual(first, second);
  });

  test("a Retry-After longer than the policy allows goes back to the caller at once", async () => {
    state.replies = [{ status: 429, headers: { "Retry-After": "120" }, body: errorBody("throttled", "Slow down.") }];
    await assert.rejects(client().memory.tools(), (error) => {
      assert.ok(error instanceof RateLimitedError);
      assert.equal(error.retryAfter, 120);
      return true;
    });
    assert.equal(state.seen.length, 1);
  });

  test("error bodies become typed errors with code, message and fields", async () => {
    state.replies = [{ status: 400, body: errorBody("invalid", "Invalid input.", { channel: ["This field is required."] }) }];
    await assert.rejects(client().memoryUsers.identify({ channel: "", external_id: "1" }), (error) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.code, "invalid");
      assert.deepEqual(error.fields, { channel: ["This field is required."] });
      return true;
    });
    state.replies = [{ status: 404, body: "<html>not json</html>", headers: { "Content-Type": "text/html" } }];
    await assert.rejects(client().threads.history("t-1"), (error) => {
      assert.ok(error instanceof NotFoundError);
      assert.equal(error.code, "error");
      assert.equal(error.message, "<html>not json</html>");
      return true;
    });
  });

  test("an unreachable server raises TransportError after the retries", async () => {
    const closed = createServer();
    await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = closed.address().port;
    await new Promise((resolve) => closed.close(resolve));
    const unreachable = new MemoryClient({ baseUrl: `http://127.0.0.1:${port}`, retry: { maxAttempts: 2, backoffMs: 1 } });
    await assert.rejects(unreachable.memory.tools(), TransportError);
  });

  test("a slow answer times out as a TransportError", async () => {
    const timers = [];
    const slow = createServer((req, res) => timers.push(setTimeout(() => res.end("[]"), 2000)));
    await new Promise((resolve) => slow.listen(0, "127.0.0.1", resolve));
    const impatient = new MemoryClient({
      baseUrl: `http://127.0.0.1:${slow.address().port}`,
      timeoutMs: 100,
      retry: { maxAttempts: 1 },
    });
    try {
      await assert.rejects(impatient.memory.tools(), TransportError);
    } finally {
      timers.forEach(clearTimeout);
      slow.closeAllConnections();
      await new Promise((resolve) => slow.close(resolve));
    }
  });
});

test("parseRetryAfter reads seconds and HTTP dates", () => {
  const now = Date.parse("Mon, 23 Nov 2026 12:00:00 GMT");
  assert.equal(parseRetryAfter("3", now), 3000);
  assert.equal(parseRetryAfter("Mon, 23 Nov 2026 12:00:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("Mon, 23 Nov 2026 11:00:00 GMT", now), 0);
  assert.equal(parseRetryAfter("soon", now), undefined);
  assert.equal(parseRetryAfter(null, now), undefined);
});
