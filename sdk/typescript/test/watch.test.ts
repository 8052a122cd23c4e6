import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';

import type { JobEvent } from '@leasehold/sdk';

import { client, ended, reaches } from './env.js';

const c = client();

/**
 * dropOnce is a TCP proxy to the API that cuts the first connection whose
 * answer carries a progress event, right after passing that chunk on (it may
 * end inside an event), and lets every other connection through.
 */
async function dropOnce(): Promise<{ url: string; connections: () => number; cuts: () => number; close: () => void }> {
  const api = new URL(process.env.LEASEHOLD_URL ?? '');
  let connections = 0;
  let cuts = 0;
  const server = net.createServer((downstream) => {
    connections++;
    const upstream = net.connect(Number(api.port), api.hostname);
    downstream.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      downstream.write(chunk);
      if (cuts === 0 && chunk.includes('event: progress')) {
        cuts++;
        downstream.destroy();
        upstream.destroy();
      }
    });
    upstream.on('end', () => downstream.end());
    upstream.on('error', () => downstream.destroy());
    downstream.on('error', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    cuts: () => cuts,
    close: () => server.close(),
  };
}

/** What scripted's proxy does with an events request: pass it through, pass its first event alone, or send none. */
type Act = 'pass' | 'first' | 'none';

/**
 * scripted is an HTTP proxy to the API that passes every request through
 * but the event streams, which it answers as act, called with their count
 * from 1, says. An answer ends cleanly (as a proxy's idle timeout ends it):
 * it is no broken connection.
 */
async function scripted(act: (n: number) => Promise<Act>): Promise<{ url: string; close: () => void }> {
  const api = process.env.LEASEHOLD_URL ?? '';
  let streams = 0;
  const server = http.createServer((req, res) => {
    void (async () => {
      const what = req.url?.endsWith('/events') ? await act(++streams) : 'pass';
      if (what === 'none') {
        res.writeHead(200, { 'Content-Type': 'text/event-stream' }).end();
        return;
      }
      const headers = Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'connection') as [string, string][];
      const up = await fetch(api + req.url, { method: req.method, headers });
      res.writeHead(up.status, { 'Content-Type': up.headers.get('content-type') ?? '' });
      for await (const chunk of up.body ?? []) {
        res.write(chunk);
        if (what === 'first' && Buffer.from(chunk).includes('\n\n')) break; // leaving the loop cancels the upstream body
      }
      res.end();
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => server.close() };
}

test('a watch that read its job as ended follows the job retried since to its new end', async () => {
  const job = await c.submit({ kind: 'sleep', input: { duration: '1500ms', tick: '100ms' } });
  await c.cancel(job.id);
  assert.equal((await ended(c, job.id)).state, 'cancelled');
  const before: JobEvent[] = [];
  for await (const e of c.watch(job.id)) before.push(e);
  const last = before.at(-1)?.id;

  // The first stream, after the end, is empty: the watch reads the job as
  // cancelled. The job is retried before the second, which ends after the
  // retry's first event; the third ends with none, the job running.
  const proxy = await scripted(async (n) => {
    if (n === 2) await c.retry(job.id);
    return n === 1 ? 'pass' : n === 2 ? 'first' : n === 3 ? 'none' : 'pass';
  });
  try {
    const seen: JobEvent[] = [];
    for await (const e of client({ url: proxy.url }).watch(job.id, { lastEventId: last, signal: AbortSignal.timeout(30_000) })) {
      seen.push(e);
    }
    const end = seen.at(-1);
    assert.ok(end?.event === 'state' && end.data.state === 'succeeded', `the watch ended at ${JSON.stringify(end)}`);
    const rest: JobEvent[] = [];
    for await (const e of c.watch(job.id, { lastEventId: last })) rest.push(e);
    assert.deepEqual(seen, rest);
  } finally {
    proxy.close();
  }
});

test('watch resumes after a dropped connection without losing or repeating an event', async () => {
  const proxy = await dropOnce();
  try {
    const job = await c.submit({ kind: 'sleep', input: { duration: '1500ms', tick: '100ms' } });
    const seen: JobEvent[] = [];
    for await (const e of client({ url: proxy.url }).watch(job.id, { signal: AbortSignal.timeout(30_000) })) seen.push(e);
    assert.equal(proxy.cuts(), 1, 'the proxy cut a stream');
    assert.ok(proxy.connections() >= 2, `${proxy.connections()} connections`);

    const last = seen.at(-1);
    assert.ok(last?.event === 'state' && last.data.state === 'succeeded', `last event ${JSON.stringify(last)}`);
    const ids = seen.map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, `an event came twice: ${ids}`);
    // A watch of the ended job replays its whole stream: the resumed one must equal it.
    const replay: JobEvent[] = [];
    for await (const e of c.watch(job.id)) replay.push(e);
    assert.deepEqual(seen, replay);
    assert.ok(seen.filter((e) => e.event === 'progress').length >= 10);
  } finally {
    proxy.close();
  }
});

test('watch from a lastEventId yields only what came after it, and nothing after the end', async () => {
  const job = await c.submit({ kind: 'echo', input: { x: 1 } });
  await ended(c, job.id);
  const all: JobEvent[] = [];
  for await (const e of c.watch(job.id)) all.push(e);
  assert.ok(all.length >= 2);
  const rest: JobEvent[] = [];
  for await (const e of c.watch(job.id, { lastEventId: all[0]?.id })) rest.push(e);
  assert.deepEqual(rest, all.slice(1));
  const none: JobEvent[] = [];
  for await (const e of c.watch(job.id, { lastEventId: all.at(-1)?.id })) none.push(e);
  assert.deepEqual(none, []);
});

test('an aborted watch rejects with the abort reason', async () => {
  const job = await c.submit({ kind: 'sleep', input: { duration: '1m', tick: '100ms' } });
  await reaches(c, job.id, 'running');
  const abort = new AbortController();
  const reason = new Error('enough');
  let events = 0;
  await assert.rejects(
    (async () => {
      for await (const e of c.watch(job.id, { signal: abort.signal })) {
        events++;
        if (e.event === 'progress') abort.abort(reason);
      }
    })(),
    (err) => err === reason,
  );
  assert.ok(events >= 1);
  await c.cancel(job.id);
  await ended(c, job.id);
});
