// Submits a demo.write job, follows its event stream, and cancels it after
// a few output lines, with the SDK's client (sdk/typescript, built with
// `npm ci` there).
//
// Run: node client.js --api http://127.0.0.1:8080 --key <api key> [--cancel-after 3]
import { parseArgs } from 'node:util';

// The SDK from this checkout; `from '@leasehold/sdk'` once installed.
import { Client } from '../../sdk/typescript/dist/index.js';

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

const client = new Client({ url: args.api, key: args.key });
const job = await client.submit({ kind: 'demo.write', input: { steps: Number(args.steps), delay: 0.1 } });
console.log('submitted', job.id);
let outputs = 0;
for await (const e of client.watch(job.id)) { // resumes after a dropped connection
  if (e.event === 'output') {
    outputs++;
    console.log('output', e.data.text.trim());
    if (outputs === Number(args['cancel-after'])) {
      await client.cancel(job.id);
      console.log('cancel requested');
    }
  } else if (e.event === 'state') {
    console.log('state', e.data.state);
  }
}
