import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';

import { ConflictError, IdempotencyKeyReusedError, NotFoundError, type Job } from '@leasehold/sdk';

import { client, ended, reaches } from './env.js';

const c = client();

test('submit runs a job, and an idempotency key answers the first job again', async () => {
  const key = randomUUID();
  const job = await c.submit({ kind: 'echo', input: { hello: 'world' } }, { idempotencyKey: key });
  assert.equal(job.kind, 'echo');
  assert.equal(job.state, 'queued');
  assert.deepEqual(job.input, { hello: 'world' });
  const again = await c.submit({ input: { hello: 'world' }, kind: 'echo' }, { idempotencyKey: key });
  assert.equal(again.id, job.id);
  await assert.rejects(c.submit({ kind: 'echo', input: { hello: 'there' } }, { idempotencyKey: key }), IdempotencyKeyReusedError);
  const done = await ended(c, job.id);
  assert.equal(done.state, 'succeeded');
  assert.deepEqual(done.result, { hello: 'world' });
});

test('batch answers each item on its own', async () => {
  const results = await c.batch([{ kind: 'echo' }, { kind: 'echo', timeout: 'soon' }]);
  assert.equal(results.length, 2);
  const [ok, bad] = results;
  assert.ok(ok && 'job' in ok && ok.status === 201);
  assert.ok(bad && 'problem' in bad && bad.status === 400);
  assert.deepEqual(bad.problem.errors.map((e) => e.field), ['timeout']);
});

test('list reads every page', async () => {
  const results = await c.batch(Array.from({ length: 5 }, (_, i) => ({ kind: 'echo', queue: 'sdk-list', input: { i } })));
  const submitted = results.map((r) => ('job' in r ? r.job.id : assert.fail(`item refused: ${JSON.stringify(r)}`)));
  const first = await c.listPage({ queue: 'sdk-list', limit: 2 });
  assert.equal(first.jobs.length, 2);
  assert.notEqual(first.next_cursor, null);
  const listed: string[] = [];
  for await (const job of c.list({ queue: 'sdk-list', limit: 2 })) listed.push(job.id);
  assert.equal(new Set(listed).size, listed.length, `a job came twice: ${listed}`);
  assert.deepEqual(submitted.filter((id) => !listed.includes(id)), [], 'every job submitted is listed');
});

test('cancel stops a running job; cancelling an ended job is a conflict carrying the job', async () => {
  const job = await c.submit({ kind: 'sleep', input: { duration: '1m', tick: '100ms' } });
  await reaches(c, job.id, 'running');
  const cancelling = await c.cancel(job.id);
  assert.ok(cancelling.cancel_requested || cancelling.state === 'cancelled');
  const done = await ended(c, job.id);
  assert.equal(done.state, 'cancelled');
  assert.equal((await c.cancel(job.id)).state, 'cancelled', 'cancel is idempotent');

  const echo = await c.submit({ kind: 'echo' });
  await ended(c, echo.id);
  const err: unknown = await c.cancel(echo.id).catch((e: unknown) => e);
  assert.ok(err instanceof ConflictError, `got ${String(err)}`);
  assert.equal(err.status, 409);
  assert.equal(err.job?.id, echo.id);
  assert.equal(err.job?.state, 'succeeded');
});

test('retry runs a failed job again with a later attempt', async () => {
  const job = await c.submit({ kind: 'sleep', max_attempts: 1, input: { duration: '100ms', tick: '100ms', fail_attempts: 1 } });
  const failed = await ended(c, job.id);
  assert.equal(failed.state, 'failed');
  const queued = await c.retry(job.id);
  assert.equal(queued.state, 'queued');
  const done = await ended(c, job.id);
  assert.equal(done.state, 'succeeded');
  assert.equal(done.attempt, 2);
  await assert.rejects(c.retry(job.id), ConflictError);
});

test('signal resumes a job waiting for it, with its data', async () => {
  const job = await c.submit({ kind: 'sleep', input: { duration: '100ms', tick: '100ms', wait_for: 'approval' } });
  const waiting = await reaches(c, job.id, 'waiting');
  assert.equal(waiting.waiting_for?.name, 'approval');
  await c.signal(job.id, 'approval', { approved: true });
  const done = await ended(c, job.id);
  assert.equal(done.state, 'succeeded');
  assert.deepEqual(done.result, { signal: { approved: true }, timed_out: false });
});

test('delete forgets an ended job', async () => {
  const job = await c.submit({ kind: 'echo' });
  await ended(c, job.id);
  await c.delete(job.id);
  await assert.rejects(c.get(job.id), NotFoundError);
});

test('usage counts the day’s submissions', async () => {
  await c.submit({ kind: 'echo' });
  const usage = await c.usage({ from: new Date(), to: new Date() });
  assert.equal(usage.days.length, 1);
  assert.ok((usage.days[0]?.counts.jobs_submitted ?? 0) >= 1, JSON.stringify(usage));
});

test('queues and limits are read', async () => {
  const queues = await c.queues.list();
  assert.ok(queues.some((q) => q.name === 'default'), JSON.stringify(queues));
  const limits = await c.limits.list();
  assert.equal(limits.find((l) => l.key === 'sdk:gate')?.limit, 1, JSON.stringify(limits));
});

test('schedules are created, read, paused, resumed, triggered and deleted', async () => {
  const spec = { name: 'sdk-hourly', cron: '@every 1h', job: { kind: 'echo', input: { from: 'schedule' } } };
  const created = await c.schedules.create(spec);
  assert.equal(created.name, spec.name);
  assert.equal((await c.schedules.create(spec)).name, spec.name, 'the same spec again answers the schedule');
  await assert.rejects(c.schedules.create({ ...spec, cron: '@every 2h' }), ConflictError);
  const names: string[] = [];
  for await (const s of c.schedules.list()) names.push(s.name);
  assert.ok(names.includes(spec.name), JSON.stringify(names));
  assert.equal((await c.schedules.get(spec.name)).cron, '@every 1h');
  assert.equal((await c.schedules.pause(spec.name)).paused, true);
  assert.equal((await c.schedules.resume(spec.name)).paused, false);
  const fired: Job = await c.schedules.trigger(spec.name);
  assert.equal(fired.schedule, spec.name);
  await c.schedules.delete(spec.name);
  await assert.rejects(c.schedules.get(spec.name), NotFoundError);
});
