// Overview: each queue's counts and the last hour's finishes per minute,
// and each concurrency key's leases in use against its limit. It
// refreshes every 5 s while it is shown.
import { call, finishes, session } from './api.js';
import { h, replace, table, message } from './dom.js';
import { bars, meter } from './chart.js';

const every = 5000;

export const outcomes = [
  { key: 'succeeded', name: 'succeeded' },
  { key: 'failed', name: 'failed' },
  { key: 'cancelled', name: 'cancelled' },
  { key: 'expired', name: 'expired' },
];

export function render(root) {
  const queues = h('section', { 'aria-labelledby': 'queues-title' });
  const keys = h('section', { 'aria-labelledby': 'keys-title' });
  const status = h('p', { class: 'message', role: 'status' });
  root.append(h('h1', {}, 'Overview'), status, queues, keys);

  async function refresh() {
    try {
      const [q, l] = await Promise.all([call('GET', '/v1/queues'), call('GET', '/v1/limits')]);
      // The finishes count every tenant's jobs: only the admin reads them.
      const admin = session.admin();
      const charts = admin ? await Promise.all(q.queues.map((queue) => finishChart(queue.name))) : [];
      replace(queues, h('h2', { id: 'queues-title' }, 'Queues'),
        q.queues.length === 0 ? h('p', {}, 'No queue has had a job yet.') : table(null,
          ['Queue', 'Queued', 'Running', 'Retrying', 'Paused', admin ? 'Finished per minute, last hour' : null].filter(Boolean),
          q.queues.map((x, i) => [
            h('a', { href: `#/jobs?queue=${encodeURIComponent(x.name)}` }, x.name),
            String(x.queued), String(x.running), String(x.retrying),
            x.paused ? h('span', { class: 'badge paused' }, 'paused') : 'no',
            admin ? charts[i] : null,
          ].filter((c) => c !== null))));
      replace(keys, h('h2', { id: 'keys-title' }, 'Concurrency keys'),
        l.limits.length === 0 ? h('p', {}, 'No limit is set.') : table(null,
          ['Key', 'In use / limit, then waiting', 'In use', 'Limit', 'Waiting'],
          l.limits.map((k) => [
            k.key,
            meter({ inUse: k.in_use, limit: k.limit, waiting: k.waiting || 0 },
              `${k.key}: ${k.in_use} of ${k.limit} in use, ${k.waiting || 0} waiting`),
            String(k.in_use), String(k.limit), String(k.waiting || 0),
          ])));
      message(status, '');
    } catch (err) {
      message(status, `Could not load the overview: ${err.message}`, 'error');
    }
  }

  refresh();
  const timer = setInterval(refresh, every);
  return () => clearInterval(timer);
}

// finishChart draws one queue's finishes per minute over the last hour.
async function finishChart(queue) {
  let minutes;
  try {
    minutes = await finishes(queue);
  } catch (err) {
    return h('span', { class: 'muted' }, `unavailable (${err.message})`);
  }
  const total = {};
  for (const m of minutes) for (const o of outcomes) total[o.key] = (total[o.key] || 0) + (m.values[o.key] || 0);
  const summary = `${queue}, last hour: ` + outcomes.map((o) => `${total[o.key] || 0} ${o.name}`).join(', ');
  return h('span', { class: 'finishes' }, bars(minutes, outcomes, { width: 180, height: 32, summary }),
    h('span', { class: 'small' }, `${total.succeeded || 0} ok · ${total.failed || 0} failed`));
}
