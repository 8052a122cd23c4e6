// A Leasehold remote handler in Node, on the SDK (sdk/typescript, built
// with `npm ci` there).
//
// Run:   node handler.js 8000
// Serve: LEASEHOLD_HANDLERS=demo.write=http://127.0.0.1:8000/,demo.approve=http://127.0.0.1:8000/ worker
//
// demo.write, input {"steps": 20, "delay": 0.1}: each step streams a
// progress event and an output line, then writes the step to a store that
// checks the fencing token. When the worker closes the call (cancel, lost
// lease, timeout, shutdown) ctx.signal aborts and the handler stops at once.
//
// demo.approve, input {"action": "refund order 42"}, is an approval flow: it
// drafts the action, saves the draft as the job's checkpoint and waits for
// the signal "approval" (POST /v1/jobs/{id}/signal {"name": "approval",
// "data": {"approved": true}}), holding no worker and no slot meanwhile.
// Called again with the signal, it ends with {"action", "decision"}:
// approved, rejected or timed out.
import { setTimeout as sleep } from 'node:timers/promises';

// The SDK from this checkout; `from '@leasehold/sdk'` once installed.
import { App, Fence, Permanent, StaleTokenError } from '../../sdk/typescript/dist/index.js';

const fence = new Fence(); // the store's fencing tokens, one per job
const rows = new Map(); // the store: each job's steps
const say = (...words) => console.log(words.join(' '));

const app = new App()
  .handle('demo.write', async (ctx) => {
    const { steps = 20, delay = 0.1 } = ctx.input ?? {};
    if (!Number.isInteger(steps) || typeof delay !== 'number') throw new Permanent('input: want {"steps": int, "delay": seconds}');
    say('started', ctx.jobId, ctx.fencingToken);
    ctx.signal.addEventListener('abort', () => say('disconnected', ctx.jobId, ctx.fencingToken));
    for (let step = 1; step <= steps; step++) {
      await sleep(delay * 1000, undefined, { signal: ctx.signal });
      // The side effect, fenced: a stale execution writes nothing.
      try {
        fence.admit(ctx.jobId, ctx.fencingToken);
      } catch (err) {
        if (!(err instanceof StaleTokenError)) throw err;
        say('stale', ctx.jobId, ctx.fencingToken);
        throw new Permanent('a newer execution owns the job');
      }
      if (!rows.has(ctx.jobId)) rows.set(ctx.jobId, new Map());
      rows.get(ctx.jobId).set(step, ctx.fencingToken); // an upsert: a step done twice is one row
      ctx.progress({ step, of: steps });
      ctx.output(`line ${step}\n`);
    }
    say('finished', ctx.jobId, ctx.fencingToken);
    return { steps };
  })
  .handle('demo.approve', (ctx) => {
    if (ctx.lastCheckpoint === null) ctx.checkpoint({ draft: `approve: ${ctx.input?.action ?? 'nothing'}` });
    // Ends this call until a person answers: the job holds nothing meanwhile.
    const signal = ctx.waitForSignal('approval', { timeout: '1h' });
    let decision = 'timed out';
    if (!signal.timed_out) decision = signal.data?.approved ? 'approved' : 'rejected';
    say('decided', ctx.jobId, decision.replace(' ', '_'));
    return { action: ctx.lastCheckpoint.draft, decision };
  });

const server = await app.listen(Number(process.argv[2] ?? 8000));
say('listening', server.address().port);
