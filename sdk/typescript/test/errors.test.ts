import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';

import { BadRequestError, NotFoundError, RateLimitedError, UnauthorizedError } from '@leasehold/sdk';

import { client, ended, reaches } from './env.js';

const c = client();

test('an unknown job is a NotFoundError carrying the problem', async () => {
  const err: unknown = await c.get('no-such-job').catch((e: unknown) => e);
  assert.ok(err instanceof NotFoundError, `got ${String(err)}`);
  assert.equal(err.status, 404);
  assert.equal(err.name, 'NotFoundError');
  assert.equal(err.type, 'about:blank');
  assert.equal(err.title, 'Not Found');
  assert.ok(err.detail.length > 0);
});

test('a bad field is a BadRequestError naming it', async () => {
  const err: unknown = await c.submit({ kind: 'echo', timeout: 'soon' }).catch((e: unknown) => e);
  assert.ok(err instanceof BadRequestError, `got ${String(err)}`);
  assert.equal(err.status, 400);
  assert.deepEqual(err.errors.map((e) => e.field), ['timeout']);
});

test('options out of their bounds are refused before any call', async () => {
  assert.throws(() => client({ maxRetries: -1 }), RangeError);
  assert.throws(() => client({ maxRetryWait: Number.NaN }), RangeError);
  await assert.rejects(c.watch('x', { maxReconnects: Number.POSITIVE_INFINITY }).next(), RangeError);
  await assert.rejects(c.get('x', { wait: -1 }), RangeError);
  await assert.rejects(c.usage({ from: new Date(Number.NaN), to: '2026-01-01' }), RangeError);
});

test('an unknown key is an UnauthorizedError', async () => {
  await assert.rejects(client({ key: 'not-a-key-0123456789abcdef' }).get('x'), UnauthorizedError);
});

// fetchRecorder is a fetch that records each call: when it was sent, its
// answer, and when the answer was handed back, after onAnswer (awaited).
function fetchRecorder(onAnswer: (res: Response) => Promise<void> = async () => {}) {
  const answers: { sent: number; status: number; retryAfter: string | null; handed: number }[] = [];
  const recorded: typeof fetch = async (input, init) => {
    const sent = Date.now();
    const res = await fetch(input, init);
    await onAnswer(res);
    answers.push({ sent, status: res.status, retryAfter: res.headers.get('Retry-After'), handed: Date.now() });
    return res;
  };
  return { answers, fetch: recorded };
}

test('a full key refuses with RateLimitedError and Retry-After; only an idempotent submit is retried, after it', async () => {
  // sdk:gate has a limit of 1: a running job holds it.
  const holder = await c.submit({ kind: 'sleep', concurrency_keys: ['sdk:gate'], input: { duration: '1m', tick: '100ms' } });
  await reaches(c, holder.id, 'running');
  const busy = { kind: 'echo', concurrency_keys: ['sdk:gate'], on_busy: 'reject' } as const;

  const err: unknown = await client({ maxRetries: 0 }).submit(busy).catch((e: unknown) => e);
  assert.ok(err instanceof RateLimitedError, `got ${String(err)}`);
  assert.equal(err.status, 429);
  assert.ok(err.retryAfter !== undefined && err.retryAfter >= 1, `retryAfter ${err.retryAfter}`);

  const plain = fetchRecorder();
  await assert.rejects(client({ fetch: plain.fetch }).submit(busy), RateLimitedError);
  assert.deepEqual(plain.answers.map((a) => a.status), [429], 'a submit without an idempotency key is not repeated');

  // The first refusal frees the key, so the retry Retry-After asks for finds room.
  const keyed = fetchRecorder(async (res) => {
    if (res.status === 429 && keyed.answers.length === 0) {
      await c.cancel(holder.id);
      await ended(c, holder.id);
    }
  });
  const job = await client({ fetch: keyed.fetch }).submit(busy, { idempotencyKey: randomUUID() });
  const statuses = keyed.answers.map((a) => a.status);
  assert.equal(statuses[0], 429);
  assert.equal(statuses.at(-1), 201, `answers ${statuses}`);
  const [first, second] = keyed.answers;
  assert.ok(first && second);
  const waited = second.sent - first.handed;
  assert.ok(waited >= Number(first.retryAfter) * 1000 - 5, `the retry came ${waited} ms after a Retry-After of ${first.retryAfter} s`);
  assert.equal((await ended(c, job.id)).state, 'succeeded');
});
