import { ApiError, ConnectionError, LeaseholdError, apiError } from './errors.js';

/** How a Transport reaches the API and how patient it is. */
export interface TransportOptions {
  /** The API's base URL. Default: `LEASEHOLD_URL`, else `http://127.0.0.1:8080`. */
  url?: string;
  /** The tenant's API key. Default: `LEASEHOLD_KEY`; one of the two is required. */
  key?: string;
  /** The fetch to call. Default: the global fetch. */
  fetch?: typeof globalThis.fetch;
  /**
   * Retries of a call that may be repeated (reads, idempotent writes, a
   * submit with an idempotency key) after a 429 or a 503. Default 3.
   */
  maxRetries?: number;
  /**
   * The longest wait, in milliseconds, before a retry: a `Retry-After`
   * longer than this is thrown to the caller at once. Default 30 000.
   */
  maxRetryWait?: number;
}

export interface RequestOptions {
  query?: Record<string, string | number | undefined>;
  /** Sent as JSON when not undefined. */
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
  /** Whether the request may be sent again after a 429 or a 503. */
  retry?: boolean;
}

/**
 * Transport sends one API call: it authenticates, encodes, retries what
 * may be retried as `Retry-After` asks, and turns an error answer into its
 * typed error.
 */
export class Transport {
  readonly url: string;
  readonly #key: string;
  readonly #fetch: typeof globalThis.fetch;
  readonly #maxRetries: number;
  readonly #maxRetryWait: number;

  constructor(options: TransportOptions = {}) {
    const env = process.env;
    this.url = (options.url ?? env.LEASEHOLD_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    const key = options.key ?? env.LEASEHOLD_KEY;
    if (!key) {
      throw new LeaseholdError('no API key: pass options.key or set LEASEHOLD_KEY');
    }
    this.#key = key;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#maxRetries = bounded('maxRetries', options.maxRetries ?? 3, 100);
    this.#maxRetryWait = bounded('maxRetryWait', options.maxRetryWait ?? 30_000, 3_600_000);
  }

  /**
   * request sends the call and answers its response, unread, when its
   * status is below 400; it throws the typed ApiError otherwise, and a
   * ConnectionError when no answer came.
   */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const url = new URL(this.url + path);
    for (const [name, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#key}`, ...options.headers };
    let body: string | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['Content-Type'] = 'application/json';
    }
    const signal = options.signal;
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.#fetch(url, { method, headers, body: body ?? null, signal: signal ?? null });
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        throw new ConnectionError(`${method} ${url.pathname}: ${message(err)}`, { cause: err });
      }
      if (res.status < 400) return res;
      const err = await errorOf(res, signal);
      if (!options.retry || (res.status !== 429 && res.status !== 503) || attempt >= this.#maxRetries) throw err;
      const wait = err.retryAfter !== undefined ? err.retryAfter * 1000 : backoff(attempt);
      if (wait > this.#maxRetryWait) throw err;
      await sleep(wait, signal);
    }
  }

  /** json sends the call and answers its parsed body (undefined for a 204). */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, options);
    if (res.status === 204) return undefined as T;
    try {
      return (await res.json()) as T;
    } catch (err) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw new ConnectionError(`${method} ${path}: reading the answer: ${message(err)}`, { cause: err });
    }
  }
}

/** errorOf reads an error answer into its typed error. */
async function errorOf(res: Response, signal: AbortSignal | undefined): Promise<ApiError> {
  let body: unknown;
  try {
    const text = await res.text();
    body = res.headers.get('Content-Type')?.includes('json') ? JSON.parse(text) : undefined;
  } catch {
    if (signal?.aborted) throw signal.reason;
    // A body that breaks off or is not JSON still leaves the status to report.
  }
  return apiError(res.status, res.statusText, body, parseRetryAfter(res.headers.get('Retry-After')));
}

/** parseRetryAfter reads a Retry-After header, delay-seconds or HTTP-date, as seconds. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** backoff is the wait before retry attempt+1 when the API named none: 0.5 s doubling, jittered, at most 8 s. */
export function backoff(attempt: number): number {
  const base = Math.min(8000, 500 * 2 ** attempt);
  return base / 2 + Math.random() * (base / 2);
}

/** sleep waits ms milliseconds, or throws the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export function message(err: unknown): string {
  if (err instanceof Error) {
    // undici reports "fetch failed" and keeps the reason in its cause.
    return err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message;
  }
  return String(err);
}

/** bounded answers value when it is a number from 0 to max, and throws a RangeError otherwise. */
export function bounded(name: string, value: number, max: number): number {
  if (!Number.isFinite(value) || value < 0 || value > max) {
    throw new RangeError(`${name} must be a number from 0 to ${max}, not ${value}`);
  }
  return value;
}
