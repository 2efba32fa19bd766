/**
 * A fetch that retries, shared by every call of a client.
 *
 * Retried: connection failures and 502/503/504 when repeating the request is harmless (GET,
 * HEAD, PUT, DELETE, OPTIONS, and calls the client marks safe: reads sent as POST and writes
 * carrying idempotency keys), and 429 always, since the server refused it before it ran.
 * A `Retry-After` header (seconds or an HTTP date) sets the wait; a wait longer than
 * `maxRetryAfterMs` is not slept through, the 429 or 503 goes back to the caller instead.
 * Otherwise the wait is exponential backoff with jitter. Attempts are bounded by `maxAttempts`.
 */

import { TransportError, parseRetryAfter } from "./errors.js";

export interface RetryPolicy {
  /** Attempts per call, the first included; 1 disables retries. */
  maxAttempts: number;
  /** The first backoff; doubled per attempt, with jitter. */
  backoffMs: number;
  maxBackoffMs: number;
  /** The longest `Retry-After` the client waits for before giving the response back. */
  maxRetryAfterMs: number;
  retryStatuses: readonly number[];
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 4,
  backoffMs: 200,
  maxBackoffMs: 5_000,
  maxRetryAfterMs: 30_000,
  retryStatuses: Object.freeze([429, 502, 503, 504]),
});

export type FetchLike = (input: Request, init?: RequestInit) => Promise<Response>;

const SAFE_METHODS = new Set(["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]);

export function backoffDelay(policy: RetryPolicy, attempt: number): number {
  const base = Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** (attempt - 1));
  return base * (0.5 + Math.random() / 2);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** One attempt, aborted after `timeoutMs` or when the caller's signal aborts. */
async function attemptOnce(fetchImpl: FetchLike, request: Request, timeoutMs: number | undefined): Promise<Response> {
  if (!timeoutMs) return fetchImpl(request.clone());
  const controller = new AbortController();
  const onAbort = () => controller.abort(request.signal.reason);
  request.signal.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => controller.abort(new TransportError(`no response within ${timeoutMs} ms`)), timeoutMs);
  try {
    return await fetchImpl(request.clone(), { signal: controller.signal });
  } finally {
    clearTimeout(timer);
    request.signal.removeEventListener("abort", onAbort);
  }
}

export interface RetryingFetchOptions {
  policy: RetryPolicy;
  fetch: FetchLike;
  timeoutMs?: number | undefined;
  /** True when the call may be repeated after it possibly reached the server. */
  retrySafe?: boolean | undefined;
}

export function retryingFetch(options: RetryingFetchOptions): (request: Request) => Promise<Response> {
  const { policy, fetch: fetchImpl, timeoutMs } = options;
  const maxAttempts = Math.max(1, Math.floor(policy.maxAttempts));
  return async (request: Request) => {
    const retrySafe = options.retrySafe ?? SAFE_METHODS.has(request.method.toUpperCase());
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= maxAttempts;
      let response: Response;
      try {
        response = await attemptOnce(fetchImpl, request, timeoutMs);
      } catch (error) {
        // The caller gave up: never retried, the abort reason goes back as is.
        if (request.signal.aborted) throw error;
        if (last || !retrySafe) {
          const reason = error instanceof Error ? error.message : String(error);
          throw new TransportError(`${request.method} ${request.url}: ${reason}`, { cause: error });
        }
        await sleep(backoffDelay(policy, attempt), request.signal);
        continue;
      }
      const retryable =
        policy.retryStatuses.includes(response.status) && (response.status === 429 || retrySafe);
      if (last || !retryable) return response;
      const hinted = parseRetryAfter(response.headers.get("Retry-After"));
      if (hinted !== undefined && hinted > policy.maxRetryAfterMs) return response;
      // Release the connection before waiting.
      await response.body?.cancel().catch(() => undefined);
      await sleep(hinted ?? backoffDelay(policy, attempt), request.signal);
    }
  };
}
