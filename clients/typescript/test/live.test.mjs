// The agent loop end to end against a live memory server. The pytest driver
// (clients/typescript/tests/test_typescript_client.py) starts one and sets
// MEMORY_SERVER_URL and MEMORY_API_KEY (a workspace key; the workspace has the agent "assistant").
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { MemoryClient, NotFoundError, ValidationError } from "../dist/index.js";

const baseUrl = process.env.MEMORY_SERVER_URL;
const apiKey = process.env.MEMORY_API_KEY;
const agent = "assistant";

describe("against a live server", { skip: !baseUrl && "MEMORY_SERVER_URL is not set" }, () => {
  // Generous: the first request to a fresh server process loads the local embedding model.
  const client = new MemoryClient({ baseUrl, apiKey, timeoutMs: 180_000 });

  test("identify, context, append, extract, search, recall", async () => {
    const identified = await client.memoryUsers.identify({
      channel: "telegram",
      external_id: "ts-1",
      profile: { name: "Ada" },
    });
    assert.equal(identified.created, true);
    const person = identified.memory_user;
    const again = await client.memoryUsers.identify({ channel: "telegram", external_id: "ts-1" });
    assert.equal(again.created, false);
    assert.equal(again.memory_user.id, person.id);

    const turn = await client.context.assemble({
      agent,
      memory_user: person.id,
      message: "I ran the Berlin marathon in 2023. Any tips for the next one?",
      append: true,
      token_budget: 1500,
    });
    assert.ok(turn.thread, "the turn opened a thread");
    assert.ok(turn.appended_message, "the message was stored");
    assert.ok(turn.tokens <= 1500);
    assert.equal(typeof turn.system_prompt, "string");

    const appended = await client.threads.appendMessage(turn.thread, {
      role: "assistant",
      content: "Congratulations! Build mileage slowly.",
    });
    assert.equal(appended.messages.length, 1);
    const window = await client.threads.history(turn.thread, { max_messages: 10 });
    assert.deepEqual(
      window.messages.map((m) => m.role),
      ["user", "assistant"],
    );

    const extracted = await client.episodicEntries.extract({
      agent,
      memory_user: person.id,
      thread: turn.thread,
      candidates: [
        {
          content: "Ran the Berlin marathon in 2023.",
          source: "user_assertion",
          evidence: "I ran the Berlin marathon in 2023.",
        },
      ],
      use_llm: false,
      sync: true,
    });
    assert.ok("stored" in extracted, "sync extraction answers what it stored");
    assert.deepEqual(
      extracted.stored.map((e) => e.content),
      ["Ran the Berlin marathon in 2023."],
    );

    const found = await client.episodicEntries.search({ agent, memory_user: person.id, query: "marathon" });
    assert.equal(found.results[0]?.entry.content, "Ran the Berlin marathon in 2023.");

    const { data: remembered } = await client.api.POST("/api/v1/facts/remember/", {
      body: { key: "favourite_tea", value: "sencha", scope: "user", memory_user: person.id },
    });
    assert.equal(remembered?.outcome, "created");
    const recalled = await client.memory.recall({ key: "favourite tea", memory_user: person.id });
    assert.equal(recalled.facts[0]?.value, "sencha");

    const nextTurn = await client.context.assemble({ agent, memory_user: person.id, message: "Marathon tips?" });
    assert.ok(nextTurn.memory.text.includes("Ran the Berlin marathon in 2023."));

    const keys = [];
    for await (const fact of client.paginate("/api/v1/facts/", { memory_user: person.id }, { pageSize: 1 })) {
      keys.push(fact.key);
    }
    assert.deepEqual(keys, ["favourite_tea"]);
  });

  test("a missing row answers NotFoundError with the server's error body", async () => {
    await assert.rejects(
      client.threads.history("00000000-0000-4000-8000-000000000000"),
      (error) => {
        assert.ok(error instanceof NotFoundError);
        assert.equal(error.status, 404);
        assert.equal(error.code, "not_found");
        assert.ok(error.message);
        return true;
      },
    );
  });

  test("bad input answers ValidationError naming the field", async () => {
    await assert.rejects(
      client.memoryUsers.identify({ channel: "telegram", external_id: "x", unknown_field: 1 }),
      (error) => {
        assert.ok(error instanceof ValidationError);
        assert.equal(error.status, 400);
        assert.ok("unknown_field" in error.fields, JSON.stringify(error.fields));
        return true;
      },
    );
  });
});
