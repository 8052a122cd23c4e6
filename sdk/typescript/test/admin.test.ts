import assert from 'node:assert/strict';
import { test } from 'node:test';

import { NotFoundError } from '@leasehold/sdk';

import { admin, client } from './env.js';

test('the admin tenant sets and removes limits; a key with a colon and a slash is one path segment', async () => {
  const a = admin();
  const set = await a.limits.set('sdk:team/extra', { limit: 3, per_tenant: 2 });
  assert.equal(set.key, 'sdk:team/extra');
  assert.equal(set.limit, 3);
  assert.equal(set.per_tenant, 2);
  assert.equal((await a.limits.list()).find((l) => l.key === 'sdk:team/extra')?.limit, 3);
  await a.limits.delete('sdk:team/extra');
  assert.equal((await a.limits.list()).find((l) => l.key === 'sdk:team/extra'), undefined);
  await assert.rejects(client().limits.set('sdk:team/extra', { limit: 3 }), NotFoundError);
});

test('update changes only the fields it names', async () => {
  const a = admin();
  await a.limits.set('sdk:team/patched', { limit: 3, rpm: 600, tpm: 9000 });
  const updated = await a.limits.update('sdk:team/patched', { limit: 5, rpm: null });
  assert.deepEqual([updated.limit, updated.rpm, updated.tpm], [5, null, 9000]);
  await a.limits.delete('sdk:team/patched');
});

test('the admin tenant pauses and resumes a queue; another tenant may not', async () => {
  const a = admin();
  assert.equal((await a.queues.pause('sdk-admin')).paused, true);
  assert.equal((await a.queues.resume('sdk-admin')).paused, false);
  await assert.rejects(client().queues.pause('sdk-admin'), NotFoundError);
});
