// Compile-time checks of the public types (`npm run compile`): no code here runs.
import { MemoryClient, type ListPath, type MessageInput } from "../src/index.js";

declare const client: MemoryClient;

export async function agentLoop(): Promise<void> {
  const { memory_user: person, created } = await client.memoryUsers.identify({ channel: "telegram", external_id: "1" });
  const _created: boolean = created;
  const turn = await client.context.assemble({ agent: "a", memory_user: person.id, message: "hi", append: true });
  const _prompt: string = turn.system_prompt;
  const _thread: string | null = turn.thread;
  const message: MessageInput = { role: "assistant", content: "hello" };
  const appended = await client.threads.appendMessages(turn.thread!, [message]);
  const _ids: string[] = appended.messages.map((m) => m.id);
  const extracted = await client.episodicEntries.extract({ agent: "a", thread: turn.thread, sync: true });
  // 200 with what was stored when `sync`, else 202 queued.
  const _stored: string[] = "stored" in extracted ? extracted.stored.map((e) => e.content) : [];
  const found = await client.episodicEntries.search({ memory_user: person.id, query: "marathon" });
  const _score: number | undefined = found.results[0]?.score;
  await client.episodicEntries.search({
    memory_user: person.id,
    query: "marathon",
    created_after: "2026-11-01T00:00:00Z",
    source: ["user_assertion"],
    metadata: { topic: "sport" },
  });
  // @ts-expect-error: not a source
  await client.episodicEntries.search({ memory_user: person.id, query: "x", source: ["gossip"] });
  const recalled = await client.memory.recall({ query: "tea" });
  void recalled;
  for await (const fact of client.paginate("/api/v1/facts/", { memory_user: person.id })) {
    const _key: string = fact.key;
  }
  const { data } = await client.api.GET("/api/v1/agents/{slug}/", { params: { path: { slug: "a" } } });
  const _slug: string | undefined = data?.slug;
  // @ts-expect-error: a role the schema does not allow
  await client.threads.appendMessage("t", { role: "wizard", content: "x" });
  // @ts-expect-error: a message needs content, tool_calls or files
  await client.threads.appendMessage("t", { role: "user" });
  // @ts-expect-error: a search needs memory_user or thread
  await client.episodicEntries.search({ query: "marathon" });
  // @ts-expect-error: identify needs a channel
  await client.memoryUsers.identify({ external_id: "1" });
  // @ts-expect-error: not a path of the API
  await client.api.GET("/api/v1/nope/");
  const _list: ListPath = "/api/v1/threads/";
  // @ts-expect-error: not a list
  const _notList: ListPath = "/api/v1/context/";
}
