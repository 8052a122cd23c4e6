import { ConnectionError, LeaseholdError } from './errors.js';
import { Transport, backoff, bounded, sleep, type TransportOptions } from './http.js';
import { parseEvents } from './sse.js';
import {
  terminalStates,
  type BatchItem,
  type BatchResult,
  type Duration,
  type Job,
  type JobEvent,
  type JobPage,
  type Json,
  type Limit,
  type LimitSpec,
  type ListFilter,
  type Queue,
  type Schedule,
  type SchedulePage,
  type ScheduleSpec,
  type Submission,
  type Usage,
} from './types.js';

export type ClientOptions = TransportOptions;

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call (and any wait before a retry); it rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

export interface SubmitOptions extends CallOptions {
  /**
   * Makes the submit safe to repeat: the same key with the same body within
   * 24 h answers the first job. With one, a 429 or 503 is retried.
   */
  idempotencyKey?: string;
}

export interface GetOptions extends CallOptions {
  /** Hold the call until the job ends or this long passes (at most 60 s). */
  wait?: Duration;
}

export interface WatchOptions extends CallOptions {
  /** Start after this event (an `id` of an earlier watch) instead of from the start. */
  lastEventId?: string;
  /** Reconnections in a row, with no event between them, before the watch gives up. Default 5. */
  maxReconnects?: number;
}

export interface UsageQuery {
  /** First UTC day: a date (its UTC day is taken) or `YYYY-MM-DD`. */
  from: Date | string;
  /** Last UTC day, included. */
  to: Date | string;
  /** The admin tenant only: another tenant's usage. */
  tenant?: string;
}

/**
 * Client calls a Leasehold API as one tenant. Calls that may be repeated
 * are retried after a 429 or 503 as `Retry-After` asks; every error answer
 * is thrown as a typed ApiError subclass.
 */
export class Client {
  readonly http: Transport;
  readonly queues: Queues;
  readonly limits: Limits;
  readonly schedules: Schedules;

  constructor(options: ClientOptions = {}) {
    this.http = new Transport(options);
    this.queues = new Queues(this.http);
    this.limits = new Limits(this.http);
    this.schedules = new Schedules(this.http);
  }

  /** submit creates a job (or, with an idempotency key seen before, answers its job). */
  submit(submission: Submission, options: SubmitOptions = {}): Promise<Job> {
    const key = options.idempotencyKey;
    return this.http.json('POST', '/v1/jobs', {
      body: submission,
      headers: key === undefined ? {} : { 'Idempotency-Key': key },
      signal: options.signal,
      retry: key !== undefined,
    });
  }

  /**
   * batch submits up to 1000 jobs in one call; each item succeeds or fails
   * on its own, and its result says which. The call is retried after a 429
   * or 503 only when every item has an idempotency key.
   */
  async batch(items: readonly BatchItem[], options: CallOptions = {}): Promise<BatchResult[]> {
    const res = await this.http.json<{ jobs: BatchResult[] }>('POST', '/v1/jobs/batch', {
      body: { jobs: items },
      signal: options.signal,
      retry: items.every((i) => i.idempotency_key !== undefined),
    });
    return res.jobs;
  }

  /** get reads a job; with `wait`, once it has ended or the wait is over. */
  async get(id: string, options: GetOptions = {}): Promise<Job> {
    return this.http.json('GET', jobPath(id), {
      query: { wait: options.wait === undefined ? undefined : duration(options.wait) },
      signal: options.signal,
      retry: true,
    });
  }

  /** listPage reads one page of the caller's jobs, newest first. */
  listPage(filter: ListFilter = {}, options: CallOptions = {}): Promise<JobPage> {
    return this.http.json('GET', '/v1/jobs', { query: { ...filter }, signal: options.signal, retry: true });
  }

  /** list yields the caller's jobs, newest first, reading page after page. */
  list(filter: ListFilter = {}, options: CallOptions = {}): AsyncGenerator<Job, void, undefined> {
    return paged(filter.cursor, async (cursor) => {
      const page = await this.listPage({ ...filter, cursor }, options);
      return [page.jobs, page.next_cursor];
    });
  }

  /**
   * cancel stops a job: a queued one is cancelled at once, a running one
   * once its owner stops. A job that already ended otherwise is a ConflictError.
   */
  cancel(id: string, options: CallOptions = {}): Promise<Job> {
    return this.http.json('POST', `${jobPath(id)}/cancel`, { signal: options.signal, retry: true });
  }

  /** retry queues an ended (failed, cancelled or expired) job again with fresh attempts. */
  retry(id: string, options: CallOptions = {}): Promise<Job> {
    return this.http.json('POST', `${jobPath(id)}/retry`, { signal: options.signal });
  }

  /** delete forgets an ended job with its input, result and events. */
  async delete(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.json('DELETE', jobPath(id), { signal: options.signal, retry: true });
  }

  /** signal sends a named signal to a job; a job waiting for it is queued again at once. */
  signal(id: string, name: string, data?: Json, options: CallOptions = {}): Promise<Job> {
    return this.http.json('POST', `${jobPath(id)}/signal`, { body: { name, data }, signal: options.signal });
  }

  /**
   * watch yields a job's events, from the start (or after `lastEventId`),
   * and ends after the event of its terminal state. A connection that
   * drops is opened again after the last event received, so no event is
   * missed or yielded twice.
   */
  async *watch(id: string, options: WatchOptions = {}): AsyncGenerator<JobEvent, void, undefined> {
    const { signal } = options;
    const maxReconnects = bounded('maxReconnects', options.maxReconnects ?? 5, 1000);
    let last = options.lastEventId;
    let failures = 0;
    // The server ends a stream at once, with nothing, when its job has
    // ended before the Last-Event-ID: the stream opened next after reading
    // the job as ended, if empty, is the end of the watch. Any later one
    // is not: the job may have been retried since.
    let ended = false;
    for (;;) {
      const afterEnd = ended;
      ended = false;
      let received = 0;
      let broke: ConnectionError | undefined;
      try {
        const res = await this.http.request('GET', `${jobPath(id)}/events`, {
          headers: last === undefined ? { Accept: 'text/event-stream' } : { Accept: 'text/event-stream', 'Last-Event-ID': last },
          signal,
          retry: true,
        });
        if (res.body === null) throw new ConnectionError(`GET ${jobPath(id)}/events: no body`);
        for await (const e of parseEvents(res.body)) {
          if (e.id === undefined) throw new LeaseholdError(`event stream of ${id}: an event without an id`);
          const event = { id: e.id, event: e.event, data: JSON.parse(e.data) } as JobEvent;
          last = e.id;
          received++;
          failures = 0;
          yield event;
          signal?.throwIfAborted(); // the consumer may have aborted while it held the event
          if (event.event === 'state' && terminalStates.has(event.data.state)) return;
        }
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (!(err instanceof ConnectionError)) throw err;
        broke = err;
      }
      if (broke === undefined && received === 0) {
        if (afterEnd) return;
        ended = terminalStates.has((await this.get(id, { signal })).state);
        if (ended) continue;
      }
      if (received === 0 && ++failures > maxReconnects) {
        throw broke ?? new ConnectionError(`event stream of ${id}: ended ${failures} times without an event`);
      }
      await sleep(backoff(failures), signal);
    }
  }

  /** usage reads the caller's usage counts for each UTC day from `from` to `to`. */
  async usage(query: UsageQuery, options: CallOptions = {}): Promise<Usage> {
    return this.http.json('GET', '/v1/usage', {
      query: { from: day(query.from), to: day(query.to), tenant: query.tenant },
      signal: options.signal,
      retry: true,
    });
  }
}

/** Queues reads queue counts and (the admin tenant) pauses and resumes queues. */
export class Queues {
  constructor(private readonly http: Transport) {}

  async list(options: CallOptions = {}): Promise<Queue[]> {
    return (await this.http.json<{ queues: Queue[] }>('GET', '/v1/queues', { signal: options.signal, retry: true })).queues;
  }

  /** pause stops workers claiming from the queue (admin only; others get a NotFoundError). */
  pause(name: string, options: CallOptions = {}): Promise<Queue> {
    return this.http.json('POST', `/v1/queues/${encodeURIComponent(name)}/pause`, { signal: options.signal, retry: true });
  }

  /** resume lets workers claim from the queue again (admin only). */
  resume(name: string, options: CallOptions = {}): Promise<Queue> {
    return this.http.json('POST', `/v1/queues/${encodeURIComponent(name)}/resume`, { signal: options.signal, retry: true });
  }
}

/** Limits reads the fleet's concurrency limits and budgets, and (the admin tenant) sets them. */
export class Limits {
  constructor(private readonly http: Transport) {}

  /** list reads every key's limit, page after page, in key order. */
  async list(options: CallOptions = {}): Promise<Limit[]> {
    const all: Limit[] = [];
    const pages = paged(undefined, async (cursor) => {
      const p = await this.http.json<{ limits: Limit[]; next_cursor?: string | null }>('GET', '/v1/limits', {
        query: { limit: 500, cursor },
        signal: options.signal,
        retry: true,
      });
      return [p.limits, p.next_cursor];
    });
    for await (const l of pages) all.push(l);
    return all;
  }

  /** set gives a key its whole configuration: fields left out are removed (admin only). */
  set(key: string, spec: LimitSpec, options: CallOptions = {}): Promise<Limit> {
    return this.http.json('PUT', limitPath(key), { body: spec, signal: options.signal, retry: true });
  }

  /**
   * update changes the fields of a key's configuration it names (a JSON
   * merge patch: null removes a field, a field left out stays; admin only).
   */
  update(key: string, patch: { [F in keyof LimitSpec]?: LimitSpec[F] | null }, options: CallOptions = {}): Promise<Limit> {
    return this.http.json('PATCH', limitPath(key), { body: patch, signal: options.signal, retry: true });
  }

  /** delete removes a key's limit (admin only). */
  async delete(key: string, options: CallOptions = {}): Promise<void> {
    await this.http.json('DELETE', limitPath(key), { signal: options.signal, retry: true });
  }
}

/** Schedules creates and manages the caller's cron schedules. */
export class Schedules {
  constructor(private readonly http: Transport) {}

  /** create adds a schedule; the same spec again answers the schedule, another spec of one name is a ConflictError. */
  create(spec: ScheduleSpec, options: CallOptions = {}): Promise<Schedule> {
    return this.http.json('POST', '/v1/schedules', { body: spec, signal: options.signal, retry: true });
  }

  /** listPage reads one page of the caller's schedules, by name. */
  listPage(page: { limit?: number; cursor?: string } = {}, options: CallOptions = {}): Promise<SchedulePage> {
    return this.http.json('GET', '/v1/schedules', { query: { ...page }, signal: options.signal, retry: true });
  }

  /** list yields the caller's schedules, reading page after page. */
  list(page: { limit?: number } = {}, options: CallOptions = {}): AsyncGenerator<Schedule, void, undefined> {
    return paged(undefined, async (cursor) => {
      const p = await this.listPage({ ...page, cursor }, options);
      return [p.schedules, p.next_cursor];
    });
  }

  get(name: string, options: CallOptions = {}): Promise<Schedule> {
    return this.http.json('GET', schedulePath(name), { signal: options.signal, retry: true });
  }

  async delete(name: string, options: CallOptions = {}): Promise<void> {
    await this.http.json('DELETE', schedulePath(name), { signal: options.signal, retry: true });
  }

  pause(name: string, options: CallOptions = {}): Promise<Schedule> {
    return this.http.json('POST', `${schedulePath(name)}/pause`, { signal: options.signal, retry: true });
  }

  resume(name: string, options: CallOptions = {}): Promise<Schedule> {
    return this.http.json('POST', `${schedulePath(name)}/resume`, { signal: options.signal, retry: true });
  }

  /** trigger fires the schedule once now and answers the job it created. */
  trigger(name: string, options: CallOptions = {}): Promise<Job> {
    return this.http.json('POST', `${schedulePath(name)}/trigger`, { signal: options.signal });
  }
}

/** paged yields the items of page after page, from cursor on, until a page names no next one. */
async function* paged<T>(
  cursor: string | undefined,
  read: (cursor: string | undefined) => Promise<[T[], string | null | undefined]>,
): AsyncGenerator<T, void, undefined> {
  do {
    const [items, next] = await read(cursor);
    yield* items;
    cursor = next ?? undefined;
  } while (cursor);
}

function jobPath(id: string): string {
  return `/v1/jobs/${encodeURIComponent(id)}`;
}

function schedulePath(name: string): string {
  return `/v1/schedules/${encodeURIComponent(name)}`;
}

function limitPath(key: string): string {
  return `/v1/limits/${encodeURIComponent(key)}`;
}

/** duration writes a Duration as the Go duration string the API reads. */
export function duration(d: Duration): string {
  if (typeof d === 'string') return d;
  if (!Number.isFinite(d) || d < 0) throw new RangeError(`a duration must be a finite number of milliseconds ≥ 0, not ${d}`);
  return `${Math.round(d)}ms`;
}

/** day writes a date as the UTC day YYYY-MM-DD. */
function day(d: Date | string): string {
  return typeof d === 'string' ? d : d.toISOString().slice(0, 10);
}
