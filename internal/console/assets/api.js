// The console's one way to the API: every call carries the key from the
// tab's sessionStorage; an unknown key (401) sends the operator back to
// the login form.
import { parse } from './sse.js';

const KEY = 'leasehold.key';
const TENANT = 'leasehold.tenant';

export const session = {
  key: () => sessionStorage.getItem(KEY),
  tenant: () => sessionStorage.getItem(TENANT),
  admin: () => sessionStorage.getItem(TENANT) === 'admin',
  save(key, tenant) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(TENANT, tenant);
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(TENANT);
  },
};

// ApiError is a refusal: status and the problem's detail (RFC 9457).
export class ApiError extends Error {
  constructor(status, problem) {
    const fields = (problem.errors || []).map((e) => `${e.field}: ${e.message}`).join('; ');
    super([problem.detail || problem.title || `HTTP ${status}`, fields].filter(Boolean).join(' — '));
    this.status = status;
    this.problem = problem;
  }
}

function headers(key, extra) {
  return { Authorization: `Bearer ${key}`, ...extra };
}

async function refusal(resp) {
  let problem = {};
  try {
    problem = await resp.json();
  } catch {
    // not JSON: the status says enough
  }
  if (resp.status === 401 && session.key()) { // the key was taken away: sign in again
    session.clear();
    window.location.hash = '#/login';
  }
  return new ApiError(resp.status, problem);
}

// call sends one request and returns its JSON body (null for 204).
// A refusal throws ApiError; a conflict's job is on error.problem.
export async function call(method, path, body, key = session.key()) {
  const init = { method, headers: headers(key), cache: 'no-store' };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const resp = await fetch(path, init);
  if (!resp.ok) throw await refusal(resp);
  return resp.status === 204 ? null : resp.json();
}

// query builds "?a=1&b=2" from the values that are set.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

const terminal = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

// follow streams job id's events into onEvent until the job has ended,
// or until signal aborts. The server ends a stream after the job's last
// state event when that is terminal (a retried job has terminal events
// before others); a stream that ends otherwise dropped, and is resumed
// after the last event received (Last-Event-ID), after a pause that grows
// to 10 s. onStatus hears "live", "reconnecting" and "ended". It resolves
// with the last event id, to resume from after the job is retried.
export async function follow(id, { after = '', onEvent, onStatus = () => {}, signal }) {
  let last = after;
  let pause = 500;
  let state = ''; // the last state event's: a stream resumed after the end is empty
  while (!signal.aborted) {
    try {
      const h = headers(session.key(), { Accept: 'text/event-stream' });
      if (last) h['Last-Event-ID'] = last;
      const resp = await fetch(`/v1/jobs/${encodeURIComponent(id)}/events`, { headers: h, signal, cache: 'no-store' });
      if (!resp.ok) {
        const err = await refusal(resp);
        if (resp.status < 500 && resp.status !== 429) throw err; // asking again will not help
      } else {
        onStatus('live');
        pause = 500;
        for await (const e of parse(resp.body)) {
          last = e.id;
          let data = null;
          try {
            data = JSON.parse(e.data);
          } catch {
            data = e.data;
          }
          if (e.event === 'state' && data) state = data.state;
          onEvent({ id: e.id, type: e.event, data });
        }
        if (terminal.has(state)) {
          onStatus('ended');
          return last;
        }
      }
    } catch (err) {
      if (signal.aborted) break;
      if (err instanceof ApiError) throw err;
    }
    onStatus('reconnecting');
    await new Promise((resolve) => {
      const t = setTimeout(resolve, pause);
      signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
    pause = Math.min(pause * 2, 10000);
  }
  return last;
}

export const isTerminal = (state) => terminal.has(state);

// finishes returns queue's jobs finished per minute over the last hour
// (admin only), oldest first, as chart columns: {label: "HH:MM", values:
// {outcome: n}}.
export async function finishes(queue) {
  const body = await call('GET', `/v1/queues/${encodeURIComponent(queue)}/stats`);
  return body.minutes.map((m) => ({
    label: m.at.slice(11, 16),
    values: { succeeded: m.succeeded, failed: m.failed, cancelled: m.cancelled, expired: m.expired },
  }));
}

// limitHistory returns an adaptive key's last hour as 60 chart columns,
// oldest first, the current minute last: {label: "HH:MM", values:
// {pushbacks: n}, effective: n (carried over minutes without a settlement;
// null before the first)}.
export async function limitHistory(key) {
  const body = await call('GET', `/v1/limits/${encodeURIComponent(key)}/history`);
  const byMinute = new Map(body.minutes.map((m) => [Date.parse(m.at), m]));
  const now = Math.floor(Date.now() / 60000) * 60000;
  const columns = [];
  let effective = null;
  for (let i = 59; i >= 0; i--) {
    const at = now - i * 60000;
    const m = byMinute.get(at);
    if (m) effective = m.effective_limit;
    columns.push({ label: new Date(at).toISOString().slice(11, 16), values: { pushbacks: m ? m.pushbacks : 0 }, effective });
  }
  return columns;
}

// allPages reads GET path a page of 500 after another while it answers a
// next_cursor, and returns the items of every page's field as one list.
export async function allPages(path, field) {
  const items = [];
  let cursor = null;
  do {
    const body = await call('GET', `${path}${query({ limit: 500, cursor })}`);
    items.push(...body[field]);
    cursor = body.next_cursor;
  } while (cursor);
  return items;
}

// allLimits returns every key the caller may see as one answer of GET
// /v1/limits: {limits: [...]}.
export async function allLimits() {
  return { limits: await allPages('/v1/limits', 'limits') };
}

// retryMatching runs the bulk retry, a call after another while the API
// answers a next_cursor, and returns how many jobs it moved.
export async function retryMatching(filter) {
  let moved = 0;
  let cursor = null;
  do {
    const body = await call('POST', '/v1/jobs/retry', cursor ? { ...filter, cursor } : filter);
    moved += body.moved;
    cursor = body.next_cursor;
  } while (cursor);
  return moved;
}
