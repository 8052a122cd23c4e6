// A Leasehold remote handler in Node, standard library only.
//
// Run:   node handler.js 8000
// Serve: LEASEHOLD_HANDLERS=demo.write=http://127.0.0.1:8000/,demo.approve=http://127.0.0.1:8000/approve worker
//
// Input: {"steps": 20, "delay": 0.1}. Each step streams a progress event
// and an output line, then writes the step to a store that checks the
// fencing token. When the worker closes the request (cancel, lost lease,
// timeout, shutdown) the handler stops at once.
//
// POST /approve (demo.approve) is an approval flow: it drafts an action
// from the input {"action": "refund order 42"}, saves the draft as the
// job's checkpoint and waits for the signal "approval" (POST
// /v1/jobs/{id}/signal {"name": "approval", "data": {"approved": true}}),
// holding no worker and no slot meanwhile. Leasehold calls again with the
// checkpoint and the signal in an envelope (header Leasehold-Resume), and
// the handler ends with {"action", "decision"}: approved, rejected or
// timed out.
'use strict';
const http = require('node:http');

// The handler's own store: each job's highest fencing token; older
// writers are refused, as a database row with a token column would.
const tokens = new Map();
function fencedWrite(jobId, token) {
  if (token < (tokens.get(jobId) ?? 0)) return false;
  tokens.set(jobId, token);
  return true;
}

const say = (...words) => console.log(words.join(' '));

const server = http.createServer((req, res) => {
  const jobId = req.headers['leasehold-job-id'];
  const token = Number(req.headers['fencing-token']);
  let body = '';
  req.on('data', (chunk) => { body += chunk; });
  req.on('end', () => {
    if (req.url === '/approve') {
      approve(jobId, req, res, body);
      return;
    }
    let steps, delay;
    try {
      const spec = JSON.parse(body || '{}');
      steps = Number.isInteger(spec.steps) ? spec.steps : 20;
      delay = typeof spec.delay === 'number' ? spec.delay : 0.1;
    } catch {
      // 400: the job fails at once; no retry would fix its input.
      res.writeHead(400, { 'Content-Type': 'text/plain' }).end('input: want {"steps": int, "delay": seconds}');
      return;
    }
    say('started', jobId, token);
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    const line = (obj) => res.write(JSON.stringify(obj) + '\n');
    let step = 0;
    const timer = setInterval(() => {
      step++;
      if (!fencedWrite(jobId, token)) {
        say('stale', jobId, token);
        line({ error: { message: 'a newer execution owns the job', retryable: false } });
        clearInterval(timer);
        res.end();
        return;
      }
      line({ event: 'progress', data: { step, of: steps } });
      line({ event: 'output', data: { text: `line ${step}\n` } });
      if (step === steps) {
        clearInterval(timer);
        res.end(JSON.stringify({ result: { steps } }) + '\n');
        say('finished', jobId, token);
      }
    }, delay * 1000);
    // The worker closed the request: stop, with no further side effect.
    res.on('close', () => {
      if (!res.writableFinished) {
        clearInterval(timer);
        say('disconnected', jobId, token);
      }
    });
  });
});

function approve(jobId, req, res, body) {
  const msg = JSON.parse(body || '{}');
  let draft, signal = null;
  if (req.headers['leasehold-resume']) {
    // A resumed call: the body is {"input", "checkpoint", "signal"}.
    draft = (msg.checkpoint || {}).draft;
    signal = msg.signal;
  } else {
    draft = 'approve: ' + String(msg.action ?? 'nothing');
  }
  res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
  const line = (obj) => res.write(JSON.stringify(obj) + '\n');
  if (!signal) {
    // Ask, save what the next call needs, and wait: the execution ends
    // here, and nothing is held while a person decides.
    line({ checkpoint: { draft } });
    res.end(JSON.stringify({ wait: { for: 'approval', timeout: '1h' } }) + '\n');
    say('waiting', jobId);
    return;
  }
  let decision = 'timed out';
  if (!signal.timed_out) decision = (signal.data || {}).approved ? 'approved' : 'rejected';
  res.end(JSON.stringify({ result: { action: draft, decision } }) + '\n');
  say('decided', jobId, decision.replace(' ', '_'));
}

server.listen(Number(process.argv[2] ?? 8000), '127.0.0.1', () => say('listening', server.address().port));
