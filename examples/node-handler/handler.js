// A Leasehold remote handler in Node, standard library only.
//
// Run:   node handler.js 8000
// Serve: LEASEHOLD_HANDLERS=demo.write=http://127.0.0.1:8000/ worker
//
// Input: {"steps": 20, "delay": 0.1}. Each step streams a progress event
// and an output line, then writes the step to a store that checks the
// fencing token. When the worker closes the request (cancel, lost lease,
// timeout, shutdown) the handler stops at once.
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

server.listen(Number(process.argv[2] ?? 8000), '127.0.0.1', () => say('listening', server.address().port));
