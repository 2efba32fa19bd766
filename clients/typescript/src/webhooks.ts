// Verifying the server's webhook requests (docs/webhooks.md), with the Web Crypto API, so it
// runs where the client does: Node 18+, edge runtimes and browsers.
//
// `X-Memory-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + raw body>`. Check it
// against the raw body before parsing it, and deduplicate on the body's `delivery_id`, which
// the signature covers, never on the unsigned `X-Memory-Delivery` header: a request replayed
// within the tolerance under a new header id still carries its signed `delivery_id`.

export const SIGNATURE_HEADER = "X-Memory-Signature";
export const DELIVERY_HEADER = "X-Memory-Delivery";
export const DELIVERY_ID_FIELD = "delivery_id";
export const DEFAULT_TOLERANCE_SECONDS = 300;

export const SIGNATURE_INVALID =
  "The webhook signature does not match the body, or its time is outside the tolerance.";
export const BODY_INVALID = "The webhook body is not a JSON object with a delivery_id.";

export class WebhookVerificationError extends Error {
  override name = "WebhookVerificationError";
}

/** A verified webhook event: the signed body, parsed. */
export interface WebhookEvent {
  id: string;
  delivery_id: string;
  type: string;
  created_at?: string;
  workspace?: string;
  actor?: string;
  data?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface VerifyOptions {
  /** The subscription's secret (`whsec_...`). */
  secret: string;
  /** The `X-Memory-Signature` header as received. */
  header: string | null | undefined;
  /** The raw request body, exactly as received: bytes, or the text they decode to. */
  body: Uint8Array | string;
  /** Seconds the signature's time may be away from `now`. */
  toleranceSeconds?: number;
  /** The current time in seconds since the epoch (for tests). */
  now?: number;
}

const encoder = new TextEncoder();

function bytes(value: Uint8Array | string): Uint8Array {
  return typeof value === "string" ? encoder.encode(value) : value;
}

function hex(buffer: ArrayBuffer): string {
  return Array.from(new Uint8Array(buffer), (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** Equal strings, compared in time that does not depend on where they differ. */
function constantTimeEqual(a: string, b: string): boolean {
  let difference = a.length ^ b.length;
  for (let i = 0; i < a.length; i += 1) {
    difference |= a.charCodeAt(i) ^ b.charCodeAt(i % Math.max(b.length, 1));
  }
  return difference === 0;
}

/** True when `header` signs `body` with `secret` and its time is within the tolerance. */
export async function signatureVerify(options: VerifyOptions): Promise<boolean> {
  const parts = new Map<string, string[]>();
  for (const item of (options.header ?? "").split(",")) {
    const [name = "", ...rest] = item.trim().split("=");
    parts.set(name, [...(parts.get(name) ?? []), rest.join("=")]);
  }
  const stamp = parts.get("t")?.[0] ?? "";
  if (!/^\d+$/.test(stamp)) {
    return false;
  }
  const now = options.now ?? Date.now() / 1000;
  if (Math.abs(now - Number(stamp)) > (options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS)) {
    return false;
  }
  const body = bytes(options.body);
  const signed = new Uint8Array(stamp.length + 1 + body.length);
  signed.set(encoder.encode(`${stamp}.`));
  signed.set(body, stamp.length + 1);
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(options.secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const expected = hex(await crypto.subtle.sign("HMAC", key, signed));
  // Every v1 is tried (a header may carry one per secret while a secret is rotated).
  let matched = false;
  for (const candidate of parts.get("v1") ?? []) {
    matched = constantTimeEqual(expected, candidate) || matched;
  }
  return matched;
}

/**
 * The event of a request whose signature holds, parsed from the raw body; throws
 * WebhookVerificationError otherwise. Deduplicate on its `delivery_id` (signed).
 */
export async function eventVerify(options: VerifyOptions): Promise<WebhookEvent> {
  if (!(await signatureVerify(options))) {
    throw new WebhookVerificationError(SIGNATURE_INVALID);
  }
  const text = typeof options.body === "string" ? options.body : new TextDecoder().decode(options.body);
  let event: unknown;
  try {
    event = JSON.parse(text);
  } catch {
    throw new WebhookVerificationError(BODY_INVALID);
  }
  if (
    typeof event !== "object" ||
    event === null ||
    Array.isArray(event) ||
    typeof (event as Record<string, unknown>)[DELIVERY_ID_FIELD] !== "string"
  ) {
    throw new WebhookVerificationError(BODY_INVALID);
  }
  return event as WebhookEvent;
}
