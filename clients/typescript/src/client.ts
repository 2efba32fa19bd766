/**
 * `MemoryClient`: every endpoint typed through `client.api` (openapi-fetch over the types
 * generated from the server's OpenAPI schema), plus named methods for the agent loop
 * (identify, context, append messages, extract, search and recall) with the same names as
 * the Python client's, in camelCase.
 *
 * Only web-platform APIs are used (fetch, Request, AbortController), so the client runs in
 * Node 20+, Deno, Bun, browsers and edge runtimes.
 */

import createClient, { type Client, type Middleware } from "openapi-fetch";

import { errorFromResponse } from "./errors.js";
import { DEFAULT_RETRY_POLICY, type FetchLike, type RetryPolicy, retryingFetch } from "./retry.js";
import type { paths } from "./schema.js";

export interface MemoryClientOptions {
  /** The server's root (`http://127.0.0.1:8000`); a trailing `/api/v1` is accepted too. */
  baseUrl: string;
  /** An API key (`mem_...`), sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** Per attempt; 30 s by default. 0 disables the timeout. */
  timeoutMs?: number;
  /** Overrides merged into `DEFAULT_RETRY_POLICY`; `{ maxAttempts: 1 }` disables retries. */
  retry?: Partial<RetryPolicy>;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
  /** The fetch to use; `globalThis.fetch` by default. */
  fetch?: FetchLike;
}

export type Paths = paths;
type Method = "get" | "put" | "post" | "delete" | "patch";
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;

/** The JSON request body of an operation. */
export type RequestBody<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

/** The JSON body of an operation's success responses. */
export type ResponseBody<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { responses: infer R }
    ? {
        [S in keyof R]: S extends 200 | 201 | 202
          ? R[S] extends { content: { "application/json": infer T } }
            ? T
            : never
          : never;
      }[keyof R]
    : never;

/** The query parameters of an operation. */
export type QueryParams<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

/** One message of an append. */
export type MessageInput = Extract<
  RequestBody<"/api/v1/threads/{thread_id}/messages/", "post">,
  readonly unknown[]
>[number];

/** The GET paths answering a page: `{count, next, previous, results}`. */
export type ListPath = {
  [P in keyof paths]: [ResponseBody<P, "get">] extends [never]
    ? never
    : ResponseBody<P, "get"> extends { results: unknown[] }
      ? P
      : never;
}[keyof paths];

/** Returns `data` from an openapi-fetch result, throwing its error when it holds one. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok) {
    throw result.error instanceof Error
      ? result.error
      : new Error(`${result.response.status} ${JSON.stringify(result.error)}`);
  }
  return result.data as T;
}

/** A client idempotency key: a UUID where crypto is available (everywhere but old Node). */
function newIdempotencyKey(): string {
  const cryptoApi = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (cryptoApi?.randomUUID) return cryptoApi.randomUUID();
  let key = "";
  for (let i = 0; i < 4; i++) key += Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, "0");
  return key;
}

function apiRoot(baseUrl: string): string {
  return baseUrl.replace(/\/+$/, "").replace(/\/api\/v1$/, "");
}

/** Every error status becomes a typed `MemoryAPIError` (`NotFoundError`, `ValidationError`, ...). */
const throwOnError: Middleware = {
  async onResponse({ response }) {
    if (!response.ok) throw await errorFromResponse(response);
    return undefined;
  },
};

export class MemoryClient {
  /**
   * Every endpoint of the schema, typed: `client.api.GET("/api/v1/facts/", { params: { query } })`.
   * Error statuses throw `MemoryAPIError` subclasses, so `data` holds the success body.
   * Retries follow the method (see retry.ts); pass `{ fetch: client.retrySafeFetch }` to mark
   * a POST that is safe to repeat.
   */
  readonly api: Client<paths, "application/json">;
  /** The retrying fetch for calls that may be repeated after reaching the server. */
  readonly retrySafeFetch: (request: Request) => Promise<Response>;

  readonly memoryUsers: MemoryUsers;
  readonly threads: Threads;
  readonly context: Context;
  readonly episodicEntries: EpisodicEntries;
  readonly memory: Memory;

  constructor(options: MemoryClientOptions) {
    const policy: RetryPolicy = { ...DEFAULT_RETRY_POLICY, ...options.retry };
    const baseFetch: FetchLike = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    const timeoutMs = options.timeoutMs ?? 30_000;
    const headers: Record<string, string> = { Accept: "application/json", ...options.headers };
    if (options.apiKey) headers.Authorization = `Bearer ${options.apiKey}`;
    this.api = createClient<paths, "application/json">({
      baseUrl: apiRoot(options.baseUrl),
      headers,
      fetch: retryingFetch({ policy, fetch: baseFetch, timeoutMs }),
    });
    this.api.use(throwOnError);
    this.retrySafeFetch = retryingFetch({ policy, fetch: baseFetch, timeoutMs, retrySafe: true });

    this.memoryUsers = new MemoryUsers(this);
    this.threads = new Threads(this);
    this.context = new Context(this);
    this.episodicEntries = new EpisodicEntries(this);
    this.memory = new Memory(this);
  }

  /**
   * Every result of a paginated list, `pageSize` rows per request:
   * `for await (const fact of client.paginate("/api/v1/facts/", { memory_user }))`.
   */
  async *paginate<P extends ListPath>(
    path: P,
    query?: Omit<QueryParams<P, "get">, "limit" | "offset">,
    options: { pageSize?: number; pathParams?: Record<string, string> } = {},
  ): AsyncGenerator<Extract<ResponseBody<P, "get">, { results: unknown[] }>["results"][number]> {
    const limit = options.pageSize ?? 100;
    let offset = 0;
    // The path is one of many; openapi-fetch's per-path overloads cannot be chosen generically.
    const get = this.api.GET as unknown as (
      path: string,
      init: { params: { query: Record<string, unknown>; path?: Record<string, string> } },
    ) => Promise<{ data?: { results: never[]; next: string | null }; response: Response }>;
    for (;;) {
      const page = unwrap(await get(path, { params: { query: { ...query, limit, offset }, path: options.pathParams } }));
      yield* page.results;
      offset += page.results.length;
      if (!page.results.length || !page.next) return;
    }
  }
}

class Resource {
  constructor(protected readonly client: MemoryClient) {}

  protected get api(): MemoryClient["api"] {
    return this.client.api;
  }

  protected get retrySafe(): { fetch: MemoryClient["retrySafeFetch"] } {
    return { fetch: this.client.retrySafeFetch };
  }
}

export class MemoryUsers extends Resource {
  /** Find or create the person behind a channel identity (safe to retry). */
  async identify(
    body: RequestBody<"/api/v1/memory-users/identify/", "post">,
  ): Promise<ResponseBody<"/api/v1/memory-users/identify/", "post">> {
    return unwrap(await this.api.POST("/api/v1/memory-users/identify/", { body, ...this.retrySafe }));
  }
}

export class Threads extends Resource {
  /** The existing thread for (agent, memory user, chat id or client key), else a new one. */
  async resolve(
    body: Omit<RequestBody<"/api/v1/threads/", "post">, "resolve">,
  ): Promise<ResponseBody<"/api/v1/threads/", "post">> {
    // Find-or-create, so repeating it is harmless.
    return unwrap(await this.api.POST("/api/v1/threads/", { body: { ...body, resolve: true }, ...this.retrySafe }));
  }

  /**
   * Append a batch atomically. Each message without an `idempotency_key` gets one, generated
   * once per call, so a retried append stores every message once.
   */
  async appendMessages(
    threadId: string,
    messages: readonly MessageInput[],
  ): Promise<ResponseBody<"/api/v1/threads/{thread_id}/messages/", "post">> {
    const keyed = messages.map((message) => ({
      ...message,
      idempotency_key: message.idempotency_key ?? newIdempotencyKey(),
    }));
    return unwrap(
      await this.api.POST("/api/v1/threads/{thread_id}/messages/", {
        params: { path: { thread_id: threadId } },
        body: { messages: keyed },
        ...this.retrySafe,
      }),
    );
  }

  async appendMessage(
    threadId: string,
    message: MessageInput,
  ): Promise<ResponseBody<"/api/v1/threads/{thread_id}/messages/", "post">> {
    return this.appendMessages(threadId, [message]);
  }

  /** The history window a model sees, trimmed to the token or message budget. */
  async history(
    threadId: string,
    query: QueryParams<"/api/v1/threads/{thread_id}/history/", "get"> = {},
  ): Promise<ResponseBody<"/api/v1/threads/{thread_id}/history/", "get">> {
    return unwrap(
      await this.api.GET("/api/v1/threads/{thread_id}/history/", {
        params: { path: { thread_id: threadId }, query },
      }),
    );
  }
}

export class Context extends Resource {
  /**
   * Everything the agent sends to its model this turn, in one round trip. With
   * `append: true` the incoming message is stored in the same call; it gets an idempotency
   * key so a retried call stores it once.
   */
  async assemble(
    body: RequestBody<"/api/v1/context/", "post">,
  ): Promise<ResponseBody<"/api/v1/context/", "post">> {
    const keyed = body.append ? { ...body, idempotency_key: body.idempotency_key ?? newIdempotencyKey() } : body;
    return unwrap(await this.api.POST("/api/v1/context/", { body: keyed, ...this.retrySafe }));
  }
}

export class EpisodicEntries extends Resource {
  /** `recall_memory(query)`: hybrid search over one (agent, person) scope. */
  async search(
    body: RequestBody<"/api/v1/episodic-entries/search/", "post">,
  ): Promise<ResponseBody<"/api/v1/episodic-entries/search/", "post">> {
    return unwrap(await this.api.POST("/api/v1/episodic-entries/search/", { body, ...this.retrySafe }));
  }

  /** Extract entries from a transcript or a thread range; exact-hash dedupe makes retries harmless. */
  async extract(
    body: RequestBody<"/api/v1/episodic-entries/extract/", "post">,
  ): Promise<ResponseBody<"/api/v1/episodic-entries/extract/", "post">> {
    return unwrap(await this.api.POST("/api/v1/episodic-entries/extract/", { body, ...this.retrySafe }));
  }
}

export class Memory extends Resource {
  /** Facts, episodic entries and procedures for a key or a query, across tiers. */
  async recall(body: RequestBody<"/api/v1/recall/", "post">): Promise<ResponseBody<"/api/v1/recall/", "post">> {
    return unwrap(await this.api.POST("/api/v1/recall/", { body, ...this.retrySafe }));
  }

  /** The OpenAI tool schemas of the memory tools. */
  async tools(): Promise<ResponseBody<"/api/v1/tools/", "get">> {
    return unwrap(await this.api.GET("/api/v1/tools/"));
  }
}
