#!/usr/bin/env node
// Submits a demo.write job, follows its event stream, and cancels it after
// a few output lines. Node's standard library only.
//
// Run: node client.js --api http://127.0.0.1:8080 --key <api key> [--cancel-after 3]
'use strict';
const http = require('node:http');
const https = require('node:https');
const { parseArgs } = require('node:util');

const { values: args } = parseArgs({
  options: {
    api: { type: 'string', default: 'http://127.0.0.1:8080' },
    key: { type: 'string' },
    steps: { type: 'string', default: '50' },
    'cancel-after': { type: 'string', default: '3' }, // output lines before cancelling; 0: never
  },
});
if (!args.key) {
  console.error('--key is required');
  process.exit(2);
}

// request sends one API call and resolves with the response, unread.
function request(method, path, body) {
  const url = new URL(args.api + path);
  const headers = { Authorization: 'Bearer ' + args.key };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  return new Promise((resolve, reject) => {
    const req = (url.protocol === 'https:' ? https : http).request(url, { method, headers }, resolve);
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

async function call(method, path, body) {
  const res = await request(method, path, body);
  let text = '';
  for await (const chunk of res) text += chunk;
  if (res.statusCode >= 300) throw new Error(`${method} ${path}: ${res.statusCode} ${text}`);
  return JSON.parse(text);
}

// events yields [event, data] from GET /v1/jobs/{id}/events until it ends.
async function* events(id) {
  const res = await request('GET', `/v1/jobs/${id}/events`);
  let buf = '';
  let event = null;
  let data = [];
  for await (const chunk of res) {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line === '') {
        if (data.length) yield [event, JSON.parse(data.join('\n'))];
        event = null;
        data = [];
      } else if (line.startsWith('event:')) {
        event = line.slice(6).trim();
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).trimStart());
      }
    }
  }
}

async function main() {
  const job = await call('POST', '/v1/jobs', { kind: 'demo.write', input: { steps: Number(args.steps), delay: 0.1 } });
  console.log('submitted', job.id);
  let outputs = 0;
  for await (const [event, data] of events(job.id)) {
    if (event === 'output') {
      outputs++;
      console.log('output', data.text.trim());
      if (outputs === Number(args['cancel-after'])) {
        await call('POST', `/v1/jobs/${job.id}/cancel`);
        console.log('cancel requested');
      }
    } else if (event === 'state') {
      console.log('state', data.state);
    }
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
