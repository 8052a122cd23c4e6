#!/usr/bin/env node
// The handler framework's overhead per execution, against a handler that
// speaks the remote handler protocol by hand (as the examples did before
// the SDK), in one run: each answers a call with a progress line and a
// result, and a client sends the calls a worker would, one after another,
// each on a connection of its own.
//
// Run (after npm run build in sdk/typescript):
//   node sdk/typescript/bench/handler_overhead.mjs [--calls 2000]
import http from 'node:http';
import { parseArgs } from 'node:util';

import { App } from '../dist/index.js';

const { values } = parseArgs({ options: { calls: { type: 'string', default: '2000' } } });
const calls = Number(values.calls);
if (!Number.isInteger(calls) || calls < 1 || calls > 1_000_000) throw new RangeError(`--calls ${values.calls}: 1 to 1000000`);

/** raw answers a call as the protocol asks, by hand. */
function raw(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const input = JSON.parse(Buffer.concat(chunks).toString());
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    res.write(JSON.stringify({ event: 'progress', data: { step: 1 } }) + '\n');
    res.end(JSON.stringify({ result: input }) + '\n');
  });
}

const app = new App().handle('bench', (ctx) => {
  ctx.progress({ step: 1 });
  return ctx.input;
});

function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const servers = { raw: await listen(http.createServer(raw)), sdk: await app.listen(0) };

const headers = {
  'Content-Type': 'application/json',
  'Leasehold-Job-Id': 'j',
  'Leasehold-Execution-Id': 'e',
  'Leasehold-Attempt': '1',
  'Leasehold-Kind': 'bench',
  'Leasehold-Tenant': 't',
  'Fencing-Token': '7',
  'Leasehold-Deadline': '2099-01-01T00:00:00.000Z',
};

/** call sends one call to port and checks its last line is the input as the result. */
function call(port) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/', headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const lines = Buffer.concat(chunks).toString().trim().split('\n');
        if (res.statusCode !== 200 || lines.at(-1) !== '{"result":{"n":1}}') {
          reject(new Error(`${res.statusCode}: ${lines}`));
        } else {
          resolve();
        }
      });
    });
    req.on('error', reject);
    req.end('{"n": 1}');
  });
}

const times = { raw: [], sdk: [] };
const order = Object.entries(servers);
for (let i = 0; i < calls; i++) {
  // Interleaved, so both see the same machine, each first every other
  // time: the second call of a pair finds the event loop warmer.
  for (const [name, server] of i % 2 === 0 ? order : order.toReversed()) {
    const start = process.hrtime.bigint();
    await call(server.address().port);
    times[name].push(Number(process.hrtime.bigint() - start) / 1000);
  }
}
for (const [name, ts] of Object.entries(times)) {
  ts.sort((a, b) => a - b);
  const mean = ts.reduce((a, b) => a + b, 0) / ts.length;
  const at = (q) => ts[Math.floor((ts.length * q) / 100)].toFixed(0);
  console.log(`${name}: p50 ${at(50)} µs, p99 ${at(99)} µs, mean ${mean.toFixed(0)} µs over ${ts.length} calls`);
}
for (const server of Object.values(servers)) server.close();
