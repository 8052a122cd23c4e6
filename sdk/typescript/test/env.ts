// What every test file needs: clients of the API under test (its URL and
// keys come from the environment, as in production) and a deadline helper.
import { Client, terminalStates, type ClientOptions, type Job } from '@leasehold/sdk';

/** client is a client of the tenant under test, configured from LEASEHOLD_URL and LEASEHOLD_KEY. */
export function client(options: ClientOptions = {}): Client {
  return new Client(options);
}

/** admin is a client of the admin tenant (LEASEHOLD_ADMIN_KEY). */
export function admin(): Client {
  const key = process.env.LEASEHOLD_ADMIN_KEY;
  if (!key) throw new Error('LEASEHOLD_ADMIN_KEY is not set');
  return new Client({ key });
}

/** ended waits, with GET ?wait=, until the job has ended, for at most 30 s. */
export async function ended(c: Client, id: string): Promise<Job> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const job = await c.get(id, { wait: '5s' });
    if (terminalStates.has(job.state)) return job;
    if (Date.now() > deadline) throw new Error(`job ${id} is still ${job.state} after 30 s`);
  }
}

/** reaches follows the job's events until it is in state, and answers the job then. */
export async function reaches(c: Client, id: string, state: Job['state']): Promise<Job> {
  for await (const e of c.watch(id, { signal: AbortSignal.timeout(30_000) })) {
    if (e.event === 'state' && e.data.state === state) return e.data;
  }
  throw new Error(`job ${id} ended without being ${state}`);
}
