export {
  MemoryClient,
  unwrap,
  type ListPath,
  type MemoryClientOptions,
  type MessageInput,
  type Paths,
  type QueryParams,
  type RequestBody,
  type ResponseBody,
} from "./client.js";
export {
  AuthenticationError,
  ConflictError,
  type ErrorDetail,
  MemoryAPIError,
  MemoryClientError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitedError,
  ServerError,
  TransportError,
  ValidationError,
  errorFromResponse,
  parseRetryAfter,
} from "./errors.js";
export { DEFAULT_RETRY_POLICY, type FetchLike, type RetryPolicy, retryingFetch } from "./retry.js";
export type { components, operations, paths } from "./schema.js";
export {
  BODY_INVALID,
  DEFAULT_TOLERANCE_SECONDS,
  DELIVERY_HEADER,
  DELIVERY_ID_FIELD,
  SIGNATURE_HEADER,
  SIGNATURE_INVALID,
  type VerifyOptions,
  type WebhookEvent,
  WebhookVerificationError,
  eventVerify,
  signatureVerify,
} from "./webhooks.js";
