/**
 * Errors thrown by the client.
 *
 * Every error body of the server has the shape `{"error": {"code", "message", "fields"}}`;
 * `MemoryAPIError` carries those three parts plus the HTTP status, and a subclass per status
 * family lets callers branch with `instanceof` (`err instanceof NotFoundError`).
 */

import type { components } from "./schema.js";

/** The `error` object of the server's error body. */
export type ErrorDetail = components["schemas"]["ErrorDetail"];

/** Base class of everything this package throws. */
export class MemoryClientError extends Error {
  override name = "MemoryClientError";
}

/** The server could not be reached (after the configured retries), or did not answer in time. */
export class TransportError extends MemoryClientError {
  override name = "TransportError";
}

/** The server answered with an error status. */
export class MemoryAPIError extends MemoryClientError {
  override name = "MemoryAPIError";
  readonly status: number;
  readonly code: string;
  /** Invalid input: the messages per field (nested for nested fields); empty otherwise. */
  readonly fields: Record<string, unknown>;
  /** Unexpected server errors only: the id under which the server logged the failure. */
  readonly requestId: string | undefined;
  declare readonly response: Response;

  constructor(
    message: string,
    init: {
      status: number;
      code: string;
      fields?: Record<string, unknown>;
      requestId?: string;
      response: Response;
    },
  ) {
    super(message);
    this.status = init.status;
    this.code = init.code;
    this.fields = init.fields ?? {};
    this.requestId = init.requestId;
    // Not enumerable, so a logged error shows the server's answer rather than the Response.
    Object.defineProperty(this, "response", { value: init.response, enumerable: false });
  }

  override toString(): string {
    const fields = Object.keys(this.fields).length ? ` ${JSON.stringify(this.fields)}` : "";
    return `${this.name}: ${this.status} ${this.code}: ${this.message}${fields}`;
  }
}

/** 400: the request was malformed; `fields` names what is wrong. */
export class ValidationError extends MemoryAPIError {
  override name = "ValidationError";
}

/** 401: no key, or a key that is invalid, revoked or expired. */
export class AuthenticationError extends MemoryAPIError {
  override name = "AuthenticationError";
}

/** 403: the key may not do this (for example a read-only key writing). */
export class PermissionDeniedError extends MemoryAPIError {
  override name = "PermissionDeniedError";
}

/** 404: the object does not exist or belongs to another workspace or agent. */
export class NotFoundError extends MemoryAPIError {
  override name = "NotFoundError";
}

/** 409: the request conflicts with the current state. */
export class ConflictError extends MemoryAPIError {
  override name = "ConflictError";
}

/** 413: the body is larger than the server accepts. */
export class PayloadTooLargeError extends MemoryAPIError {
  override name = "PayloadTooLargeError";
}

/** 429: too many requests, after the retries the policy allowed. */
export class RateLimitedError extends MemoryAPIError {
  override name = "RateLimitedError";

  /** The server's `Retry-After` hint in seconds, when it sent one. */
  get retryAfter(): number | undefined {
    const ms = parseRetryAfter(this.response.headers.get("Retry-After"));
    return ms === undefined ? undefined : ms / 1000;
  }
}

/** 5xx: the server failed; requests safe to repeat were already retried. */
export class ServerError extends MemoryAPIError {
  override name = "ServerError";
}

const BY_STATUS: Record<number, typeof MemoryAPIError> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  429: RateLimitedError,
};

/**
 * Milliseconds to wait from a `Retry-After` header: delay-seconds or an HTTP date
 * (RFC 9110 section 10.2.3). Undefined when absent or unreadable; never negative.
 */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

function isErrorBody(body: unknown): body is { error: Partial<ErrorDetail> } {
  return (
    typeof body === "object" &&
    body !== null &&
    typeof (body as { error?: unknown }).error === "object" &&
    (body as { error?: unknown }).error !== null
  );
}

/** The error for an error response, tolerating bodies that are not the server's JSON shape. */
export async function errorFromResponse(response: Response): Promise<MemoryAPIError> {
  let code = "error";
  let message = response.statusText || `HTTP ${response.status}`;
  let fields: Record<string, unknown> = {};
  let requestId: string | undefined;
  const text = await response.clone().text().catch(() => "");
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (isErrorBody(body)) {
    code = String(body.error.code || code);
    message = String(body.error.message || message);
    fields = (body.error.fields as Record<string, unknown> | undefined) ?? {};
    requestId = body.error.request_id;
  } else if (text) {
    message = text.slice(0, 500);
  }
  const ErrorClass = BY_STATUS[response.status] ?? (response.status >= 500 ? ServerError : MemoryAPIError);
  return new ErrorClass(message, { status: response.status, code, fields, requestId, response });
}
