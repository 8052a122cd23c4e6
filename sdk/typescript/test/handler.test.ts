// The handler framework against the running API and worker: the worker
// calls this file's App for the kinds the Go test named in
// LEASEHOLD_HANDLERS, at LEASEHOLD_HANDLER_PORT.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Server } from 'node:http';

import { App, Fence, Permanent, StaleTokenError, type Json } from '@leasehold/sdk';

import { client, ended, reaches } from './env.js';

/** A key with a tpm budget: its limit shows the tokens its jobs reported. */
const metered = 'sdk:metered';
const c = client();
// What the handlers saw, for the tests to read.
const calls = new Map<string, number>();
const aborted = new Set<string>();
const count = (jobId: string): number => {
  calls.set(jobId, (calls.get(jobId) ?? 0) + 1);
  return calls.get(jobId) ?? 0;
};

const app = new App()
  .handle('sdk.agent', async (ctx) => {
    const n = count(ctx.jobId);
    const resumedFrom = ctx.lastCheckpoint;
    const input = ctx.input as { topic: string };
    if (resumedFrom === null) {
      ctx.progress({ step: 1, of: 2 });
      ctx.output('drafting\n');
      ctx.log('drafted', { topic: input.topic });
      ctx.checkpoint({ draft: `about ${input.topic}` });
    }
    const approval = ctx.waitForSignal('approval', { timeout: '1h' });
    ctx.reportUsage(1234);
    return {
      resumedFrom,
      approved: (approval.data as { approved: boolean }).approved,
      calls: n,
      attempt: ctx.attempt,
      deadlineAhead: (ctx.deadline?.getTime() ?? 0) > Date.now(),
    };
  })
  .handle('sdk.pushback', (ctx) => {
    const n = count(ctx.jobId);
    if (n === 1) ctx.pushback({ retryAfter: 0.2 });
    return { calls: n, attempt: ctx.attempt };
  })
  .handle('sdk.cancel', async (ctx) => {
    ctx.progress({ started: true });
    try {
      await sleep(60_000, undefined, { signal: ctx.signal });
    } finally {
      if (ctx.signal.aborted) aborted.add(ctx.jobId);
    }
  })
  .handle('sdk.fail', (ctx): Json => {
    throw new Permanent(`no retry fixes this input (token ${ctx.fencingToken})`);
  });

let server: Server;
before(async () => {
  server = await app.listen(Number(process.env.LEASEHOLD_HANDLER_PORT));
});
after(() => server.close());

test('a handler checkpoints, waits for a signal, resumes from both and reports usage', async () => {
  const job = await c.submit({ kind: 'sdk.agent', input: { topic: 'refunds' }, concurrency_keys: [metered], max_attempts: 1 });
  await reaches(c, job.id, 'waiting');
  const waiting = await c.get(job.id);
  assert.deepEqual(waiting.checkpoint, { draft: 'about refunds' });
  assert.equal(waiting.waiting_for?.name, 'approval');
  await c.signal(job.id, 'approval', { approved: true });
  const done = await ended(c, job.id);
  assert.equal(done.state, 'succeeded', JSON.stringify(done.error));
  assert.deepEqual(done.result, { resumedFrom: { draft: 'about refunds' }, approved: true, calls: 2, attempt: 1, deadlineAhead: true });
  const events = new Map<string, unknown>();
  for await (const e of c.watch(job.id)) events.set(e.event, e.data);
  assert.deepEqual(events.get('progress'), { step: 1, of: 2 });
  assert.deepEqual(events.get('output'), { text: 'drafting\n' });
  assert.deepEqual(events.get('log'), { message: 'drafted', topic: 'refunds' });
  const limit = (await c.limits.list()).find((l) => l.key === metered);
  assert.equal(limit?.tokens_last_minute, 1234, JSON.stringify(limit));
});

test('pushback queues the job again without spending an attempt', async () => {
  const job = await c.submit({ kind: 'sdk.pushback', max_attempts: 1 });
  const done = await ended(c, job.id);
  assert.equal(done.state, 'succeeded', JSON.stringify(done.error));
  assert.equal(done.attempt, 1);
  assert.deepEqual(done.result, { calls: 2, attempt: 1 });
});

test('cancelling a job mid-call aborts its handler’s signal', async () => {
  const job = await c.submit({ kind: 'sdk.cancel' });
  for await (const e of c.watch(job.id, { signal: AbortSignal.timeout(30_000) })) {
    if (e.event === 'progress') break;
  }
  await c.cancel(job.id);
  assert.equal((await ended(c, job.id)).state, 'cancelled');
  const deadline = Date.now() + 20_000;
  while (!aborted.has(job.id)) {
    assert.ok(Date.now() < deadline, 'the handler never saw its signal abort');
    await sleep(50);
  }
});

test('Permanent fails the job without a retry', async () => {
  const job = await c.submit({ kind: 'sdk.fail', max_attempts: 3 });
  const done = await ended(c, job.id);
  assert.equal(done.state, 'failed');
  assert.equal(done.attempt, 1);
  assert.match(done.error?.message ?? '', /no retry fixes this input \(token \d+\)/);
});

test('a fence refuses a lower token and changes nothing', () => {
  const fence = new Fence();
  fence.admit('job-1', 7);
  fence.admit('job-1', 7); // the same owner again
  fence.admit('job-2', 1); // resources are fenced apart
  assert.throws(() => fence.admit('job-1', 5), (err: unknown) => err instanceof StaleTokenError && err.highest === 7);
  fence.admit('job-1', 8);
  assert.throws(() => fence.admit('job-1', 7), StaleTokenError);
  assert.throws(() => fence.admit('job-1', 0), RangeError);
});
