// The shapes of the HTTP API's bodies, as docs/openapi.yaml defines them.
// Field names are the wire's (snake_case), so a body is used as it arrives.

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * A duration: a Go duration string (`"30s"`, `"10m"`, `"1h30m"`) or a
 * number of milliseconds.
 */
export type Duration = string | number;

export type State =
  | 'queued'
  | 'running'
  | 'retrying'
  | 'waiting'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  | 'expired';

/** The states a job never leaves (except by an explicit retry). */
export const terminalStates: ReadonlySet<State> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** A job to submit; only `kind` is required. Durations are Go strings here, as on the wire. */
export interface Submission {
  kind: string;
  queue?: string;
  input?: Json;
  concurrency_keys?: readonly string[];
  cost?: { tokens: number };
  webhook?: { url: string };
  priority?: number;
  max_attempts?: number;
  timeout?: string;
  max_wait?: string;
  delay?: string;
  on_busy?: 'queue' | 'reject';
  metadata?: { [key: string]: Json };
}

export interface Execution {
  id: string;
  worker: string;
  fencing_token: number;
  attempt: number;
  started_at: string;
  heartbeat_at: string;
  finished_at: string | null;
}

export interface JobError {
  code: string;
  message: string;
}

export interface Job {
  id: string;
  tenant: string;
  queue: string;
  kind: string;
  state: State;
  attempt: number;
  max_attempts: number;
  priority: number;
  concurrency_keys: string[];
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  cancel_requested: boolean;
  execution: Execution | null;
  result: Json;
  error: JobError | null;
  metadata: { [key: string]: Json } | null;
  /** The input as submitted; absent from a listing (it may be 1 MiB a job): get the job for it. */
  input?: Json;
  cost?: { tokens: number } | null;
  checkpoint?: Json;
  waiting_for?: { name: string; until: string } | null;
  webhook?: {
    url: string;
    state: 'pending' | 'delivered' | 'failed';
    attempts: number;
    /** The delivery's last tries (at most 20), oldest first. */
    tries: { at: string; status?: number; error?: string }[];
  } | null;
  schedule?: string | null;
}

export interface FieldError {
  field: string;
  message: string;
}

/** An RFC 9457 problem, the body of every error answer. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors: FieldError[];
}

/** One item of a batch: a submission with its own idempotency key. */
export interface BatchItem extends Submission {
  idempotency_key?: string;
}

/** One item's answer in a batch: 201 (created), 200 (its idempotency key's job), or a problem. */
export type BatchResult = { status: 200 | 201; job: Job } | { status: number; problem: Problem };

/** An event of a job's stream. A `state` event carries the job as it was then. */
export type JobEvent =
  | { id: string; event: 'state'; data: Job }
  | { id: string; event: 'output'; data: { text: string } }
  | { id: string; event: 'progress' | 'log'; data: Json };

export interface JobPage {
  jobs: Job[];
  next_cursor: string | null;
}

export interface ListFilter {
  state?: State;
  kind?: string;
  queue?: string;
  /** Jobs a page holds, 1–500 (default 50). */
  limit?: number;
  /** Where to start: a `next_cursor` of an earlier page. */
  cursor?: string;
  /** The admin tenant only: one tenant's jobs. */
  tenant?: string;
}

export interface Queue {
  name: string;
  queued: number;
  running: number;
  retrying: number;
  waiting?: number;
  paused: boolean;
}

export interface Limit {
  key: string;
  limit: number | null;
  in_use: number;
  effective_limit: number | null;
  rpm: number | null;
  requests_last_minute: number | null;
  tpm: number | null;
  tokens_last_minute: number | null;
  adaptive: boolean | null;
  per_tenant: number | null;
  throttled_until: string | null;
  waiting: number;
}

/** A limit to set: at least one field. */
export interface LimitSpec {
  limit?: number;
  rpm?: number;
  tpm?: number;
  adaptive?: boolean;
  /** The most slots one tenant may hold (needs a `limit`, at most it), and its share of `rpm` and `tpm`. */
  per_tenant?: number;
}

export interface UsageDay {
  date: string;
  /** Counter name → count; a counter with nothing on the day is absent. */
  counts: { [counter: string]: number };
}

export interface Usage {
  tenant: string;
  from: string;
  to: string;
  days: UsageDay[];
}

export interface ScheduleSpec {
  name: string;
  cron: string;
  timezone?: string;
  job: Submission;
  overlap?: 'allow' | 'skip';
}

export interface Schedule {
  name: string;
  cron: string;
  timezone: string;
  job: Submission;
  overlap: 'allow' | 'skip';
  paused: boolean;
  next_run_at: string | null;
  last_run_at: string | null;
  last_job_id: string | null;
  created_at: string;
}

export interface SchedulePage {
  schedules: Schedule[];
  next_cursor: string | null;
}
