// @leasehold/sdk: a typed client for the Leasehold HTTP API, and a
// framework for the handlers that do its jobs' work.
export { Client, Limits, Queues, Schedules, duration } from './client.js';
export type { CallOptions, ClientOptions, GetOptions, SubmitOptions, UsageQuery, WatchOptions } from './client.js';
export {
  ApiError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  IdempotencyKeyReusedError,
  LeaseholdError,
  NotFoundError,
  RateLimitedError,
  UnauthorizedError,
  UnavailableError,
} from './errors.js';
export { Transport } from './http.js';
export type { RequestOptions, TransportOptions } from './http.js';
export { parseEvents } from './sse.js';
export type { ServerSentEvent } from './sse.js';
export { terminalStates } from './types.js';
export type * from './types.js';
export { App, Context, Fence, Permanent, StaleTokenError, Suspend } from './handler.js';
export type { Handler, PushbackOptions, Signal, WaitOptions } from './handler.js';
