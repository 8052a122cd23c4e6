import type { FieldError, Job, Problem } from './types.js';

/** The base of every error this package throws. */
export class LeaseholdError extends Error {
  constructor(message?: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name; // the subclass's: a logged error says which it is
  }
}

/** The API could not be reached, or the connection broke before an answer. */
export class ConnectionError extends LeaseholdError {}

/**
 * The API answered with an error status. Its fields are the answer's
 * problem+json body (RFC 9457); `errors` names the fields a 400 refused.
 */
export class ApiError extends LeaseholdError implements Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly errors: FieldError[];
  /** Seconds the API asked the client to wait (`Retry-After`), if it did. */
  readonly retryAfter: number | undefined;

  constructor(problem: Problem, retryAfter?: number) {
    super(`${problem.status} ${problem.title}: ${problem.detail}`);
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.detail = problem.detail;
    this.errors = problem.errors;
    this.retryAfter = retryAfter;
  }
}

/** 400: the request was malformed or a field was invalid (see `errors`). */
export class BadRequestError extends ApiError {}

/** 401: the API key is missing or unknown. */
export class UnauthorizedError extends ApiError {}

/** 404: no such job or schedule, or it belongs to another tenant, or an admin-only call. */
export class NotFoundError extends ApiError {}

/**
 * 409: the job's state does not allow the call (cancel of an ended job,
 * retry of a job that has not ended…). `job` is the job as it stands when
 * the answer carried it.
 */
export class ConflictError extends ApiError {
  readonly job: Job | undefined;

  constructor(problem: Problem, retryAfter?: number, job?: Job) {
    super(problem, retryAfter);
    this.job = job;
  }
}

/** 422: an `Idempotency-Key` was reused with a different body. */
export class IdempotencyKeyReusedError extends ApiError {}

/** 429: over the submission rate, a full key with `on_busy: "reject"`, or too many open streams. */
export class RateLimitedError extends ApiError {}

/** 503: Redis is unreachable or slow (or its replicas did not confirm a write). */
export class UnavailableError extends ApiError {}

const problemMembers = new Set(['type', 'title', 'status', 'detail', 'errors']);

/**
 * apiError turns an error answer into its typed error. body is the parsed
 * body, or undefined when it was not JSON (a proxy's page, say).
 */
export function apiError(status: number, statusText: string, body: unknown, retryAfter?: number): ApiError {
  const b = isObject(body) ? body : {};
  const problem: Problem = {
    type: typeof b.type === 'string' ? b.type : 'about:blank',
    title: typeof b.title === 'string' ? b.title : statusText,
    status,
    detail: typeof b.detail === 'string' ? b.detail : statusText,
    errors: Array.isArray(b.errors) ? (b.errors as FieldError[]) : [],
  };
  if (status === 409 && typeof b.id === 'string') {
    // A 409 about a job carries the job's members beside the problem's.
    const job = Object.fromEntries(Object.entries(b).filter(([k]) => !problemMembers.has(k))) as unknown as Job;
    return new ConflictError(problem, retryAfter, job);
  }
  return new (byStatus.get(status) ?? ApiError)(problem, retryAfter);
}

const byStatus = new Map<number, new (problem: Problem, retryAfter?: number) => ApiError>([
  [400, BadRequestError],
  [401, UnauthorizedError],
  [404, NotFoundError],
  [409, ConflictError],
  [422, IdempotencyKeyReusedError],
  [429, RateLimitedError],
  [503, UnavailableError],
]);

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
