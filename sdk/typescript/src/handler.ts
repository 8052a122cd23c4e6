// The handler framework: job kinds written as functions, served to
// Leasehold's workers over the remote handler protocol (docs/handlers.md).
// One App serves every kind registered on it at one URL: a call is routed
// by its Leasehold-Kind header, so LEASEHOLD_HANDLERS names the same URL
// for each kind.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

import { duration } from './client.js';
import { LeaseholdError } from './errors.js';
import type { Duration, Json } from './types.js';

/** What a handler returns (JSON) is the job's result. */
export type Handler = (ctx: Context) => Json | void | Promise<Json | void>;

/** The signal that ended the job's last wait; `data` is null and `timed_out` true when the wait timed out. */
export interface Signal {
  name: string;
  data: Json;
  timed_out: boolean;
}

export interface WaitOptions {
  /** How long the job waits before it is called again without the signal (ms, or a Go duration). Default 1 h. */
  timeout?: Duration;
}

export interface PushbackOptions {
  /** Seconds before the job may run again: your upstream's Retry-After. */
  retryAfter?: number;
  /** The job's adaptive keys the refusal concerns; all of them when left out. */
  keys?: string[];
}

// A request's body is the worker's: its input (at most 1 MiB) with a
// checkpoint (256 KiB) and a signal's data (64 KiB) beside it.
const maxBody = 4 << 20;

/**
 * Thrown by a handler, fails the job without a retry: for a call that would
 * fail the same way again (bad input). Any other error fails the attempt,
 * and the job is retried.
 */
export class Permanent extends LeaseholdError {}

/** A write carried a fencing token lower than one the resource has seen: a newer execution owns the job. */
export class StaleTokenError extends LeaseholdError {
  constructor(
    readonly resource: string,
    readonly token: number,
    readonly highest: number,
  ) {
    super(`stale fencing token ${token} for ${JSON.stringify(resource)}: highest seen is ${highest}`);
  }
}

/**
 * Fence keeps the highest fencing token each resource has seen, in this
 * process, and refuses a lower one: the check a downstream store makes
 * before each write (Go's fencing.Memory). A store shared by several
 * processes keeps the token beside its data instead, in the write's own
 * transaction: `UPDATE ... SET token = $t WHERE job = $j AND token <= $t`.
 */
export class Fence {
  readonly #highest = new Map<string, number>();

  /** Admits token for resource, which then refuses every lower token, or throws StaleTokenError. */
  admit(resource: string, token: number): void {
    if (!resource || !Number.isSafeInteger(token) || token < 1) {
      throw new RangeError('a fenced write needs a resource name and a token from 1 up');
    }
    const highest = this.#highest.get(resource) ?? 0;
    if (token < highest) throw new StaleTokenError(resource, token, highest);
    this.#highest.set(resource, token);
  }
}

/**
 * Ends a call without a result: what waitForSignal and pushback throw. A
 * handler that catches everything must throw it on.
 */
export class Suspend {
  constructor(
    /** The wait line to end the stream with, or the 429's headers. */
    readonly end: { line: Json } | { headers: Record<string, string> },
  ) {}
}

/**
 * One call of a handler: one execution of a job. `input` is the job's
 * input, `lastCheckpoint` the last checkpoint it saved (null before the
 * first) and `lastSignal` the signal that ended its last wait (null when it
 * never waited). `signal` aborts when the worker closes the call (cancel, a
 * lost lease, the timeout, a shutdown): pass it to what you await.
 */
export class Context {
  readonly input: Json;
  readonly jobId: string;
  readonly executionId: string;
  readonly kind: string;
  readonly tenant: string;
  readonly attempt: number;
  readonly fencingToken: number;
  /** When the worker closes the call, or null when it set no deadline. */
  readonly deadline: Date | null;
  readonly traceparent: string | undefined;
  lastCheckpoint: Json;
  readonly lastSignal: Signal | null;
  readonly signal: AbortSignal;
  readonly #send: (line: Json) => void;

  constructor(req: IncomingMessage, body: Json, signal: AbortSignal, send: (line: Json) => void) {
    const h = (name: string) => String(req.headers[name] ?? '');
    this.jobId = h('leasehold-job-id');
    this.executionId = h('leasehold-execution-id');
    this.kind = h('leasehold-kind');
    this.tenant = h('leasehold-tenant');
    this.attempt = Number(h('leasehold-attempt'));
    this.fencingToken = Number(h('fencing-token'));
    if (!Number.isSafeInteger(this.attempt) || !Number.isSafeInteger(this.fencingToken)) {
      throw new Error('not a call of the remote handler protocol: Leasehold-Attempt and Fencing-Token are integers');
    }
    this.deadline = h('leasehold-deadline') ? new Date(h('leasehold-deadline')) : null;
    this.traceparent = req.headers.traceparent as string | undefined;
    if (h('leasehold-resume')) {
      // The body is an envelope: the input with what the job saved.
      const envelope = body as { input?: Json; checkpoint?: Json; signal?: Signal | null };
      this.input = envelope.input ?? null;
      this.lastCheckpoint = envelope.checkpoint ?? null;
      this.lastSignal = envelope.signal ?? null;
    } else {
      this.input = body;
      this.lastCheckpoint = null;
      this.lastSignal = null;
    }
    this.signal = signal;
    this.#send = send;
  }

  /** Sends a progress event: `{step: 3, of: 10}`. */
  progress(data: { [key: string]: Json }): void {
    this.#send({ event: 'progress', data });
  }

  /** Sends an output event: text to show as it comes, such as a model's tokens. */
  output(text: string): void {
    this.#send({ event: 'output', data: { text } });
  }

  /** Sends a log event: `{message, ...fields}`. */
  log(message: string, fields: { [key: string]: Json } = {}): void {
    this.#send({ event: 'log', data: { message, ...fields } });
  }

  /** Saves value (JSON, at most 256 KiB) as the job's checkpoint: every later execution starts with it as `lastCheckpoint`. */
  checkpoint(value: Json): void {
    this.#send({ checkpoint: value });
    this.lastCheckpoint = value;
  }

  /** Reports the tokens this execution spent, for its keys' tpm budgets and the tenant's usage: it replaces the job's estimate. */
  reportUsage(tokens: number): void {
    if (!Number.isSafeInteger(tokens) || tokens < 0) throw new RangeError(`tokens must be a whole number from 0 up, not ${tokens}`);
    this.#send({ usage: { tokens } });
  }

  /**
   * Returns the signal `name` when this call was resumed by it (or by its
   * timeout: then `timed_out` is set). Otherwise it throws Suspend, which
   * ends the call, and the job waits for the signal holding no worker or
   * slot, to be called again when it comes with the same input and its last
   * checkpoint: save what you need before waiting. A job waits for one
   * signal at a time: keep the answers of earlier ones in the checkpoint.
   */
  waitForSignal(name: string, options: WaitOptions = {}): Signal {
    if (this.lastSignal?.name === name) return this.lastSignal;
    throw new Suspend({ line: { wait: { for: name, timeout: duration(options.timeout ?? '1h') } } });
  }

  /**
   * Ends the call as pushback: your upstream refused for capacity. The job
   * goes back to its queue without spending an attempt. Call it before
   * anything is sent: the answer is a 429 instead of a stream.
   */
  pushback(options: PushbackOptions = {}): never {
    const headers: Record<string, string> = {};
    const { retryAfter, keys = [] } = options;
    if (retryAfter !== undefined) {
      if (!Number.isFinite(retryAfter) || retryAfter < 0) throw new RangeError(`retryAfter must be seconds from 0 up, not ${retryAfter}`);
      headers['Retry-After'] = String(Math.ceil(retryAfter));
    }
    if (keys.length > 0) {
      if (keys.some((k) => !k || /[,\r\n]/.test(k))) throw new RangeError(`keys must be concurrency keys, not ${JSON.stringify(keys)}`);
      headers['Leasehold-Pushback-Keys'] = keys.join(',');
    }
    throw new Suspend({ headers });
  }
}

/**
 * The kinds this program serves, by name.
 *
 * ```ts
 * const app = new App().handle('report.write', async (ctx) => {
 *   ctx.progress({ step: 1 });
 *   return { ok: true };
 * });
 * await app.listen(8000); // LEASEHOLD_HANDLERS=report.write=http://127.0.0.1:8000/
 * ```
 */
export class App {
  readonly #handlers = new Map<string, Handler>();

  /** Registers fn as the handler of kind. */
  handle(kind: string, fn: Handler): this {
    if (this.#handlers.has(kind)) throw new Error(`kind ${JSON.stringify(kind)} has a handler already`);
    this.#handlers.set(kind, fn);
    return this;
  }

  /** Listens on host:port and serves calls until the server is closed. */
  listen(port: number, host = '127.0.0.1'): Promise<Server> {
    const server = createServer((req, res) => void this.#answer(req, res));
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve(server));
    });
  }

  async #answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST') return refuse(res, 405, 'a handler answers POST only');
    let body: Json;
    try {
      body = JSON.parse((await read(req)) || '{}') as Json;
    } catch (err) {
      return refuse(res, 400, `the body: ${String(err)}`);
    }
    const kind = String(req.headers['leasehold-kind'] ?? '');
    const fn = this.#handlers.get(kind);
    if (!fn) return refuse(res, 404, `no handler for kind ${JSON.stringify(kind)}`);
    // The worker closes the connection to end the call.
    const closed = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) closed.abort(new Error('the worker closed the call'));
    });
    const send = (line: Json): void => {
      if (closed.signal.aborted) throw closed.signal.reason;
      if (!res.headersSent) res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write(JSON.stringify(line) + '\n');
    };
    let ctx: Context;
    try {
      ctx = new Context(req, body, closed.signal, send);
    } catch (err) {
      return refuse(res, 400, String(err));
    }
    let last: Json;
    try {
      last = { result: (await fn(ctx)) ?? null };
    } catch (err) {
      if (closed.signal.aborted) return;
      if (err instanceof Suspend && 'headers' in err.end && !res.headersSent) {
        res.writeHead(429, { 'Content-Type': 'text/plain', ...err.end.headers }).end();
        return;
      }
      last = lastLine(err);
    }
    if (closed.signal.aborted) return;
    try {
      send(last);
    } catch (err) {
      send({ error: { message: `the result is not JSON: ${String(err)}`, retryable: false } });
    }
    res.end();
  }
}

/** The line that ends a call its handler threw from. */
function lastLine(err: unknown): Json {
  if (err instanceof Suspend) {
    if ('line' in err.end) return err.end.line;
    return { error: { message: 'pushback after the answer began: call pushback before sending anything' } };
  }
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return { error: { message, retryable: !(err instanceof Permanent) } };
}

/** read reads a request's body, refusing one past maxBody. */
async function read(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBody) throw new RangeError(`over ${maxBody} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** refuse answers a call the handler cannot take: a 4xx fails the job without a retry. */
function refuse(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { 'Content-Type': 'text/plain' }).end(message);
}
