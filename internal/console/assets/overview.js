// Overview: each queue's counts and the last hour's finishes per minute,
// and each concurrency key's leases in use against its (effective) limit,
// its budgets' last minute, its throttle, and for an adaptive key its
// effective limit and 429s over the last hour. It refreshes every 5 s
// while it is shown.
import { allLimits, call, finishes, limitHistory, session } from './api.js';
import { h, replace, table, message, time } from './dom.js';
import { bars, meter, trend } from './chart.js';

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
      const [q, l] = await Promise.all([call('GET', '/v1/queues'), allLimits()]);
      // The finishes count every tenant's jobs: only the admin reads them.
      const admin = session.admin();
      const charts = admin ? await Promise.all(q.queues.map((queue) => finishChart(queue.name))) : [];
      replace(queues, h('h2', { id: 'queues-title' }, 'Queues'),
        q.queues.length === 0 ? h('p', {}, 'No queue has had a job yet.') : table(null,
          ['Queue', 'Queued', 'Running', 'Retrying', 'Waiting', 'Paused', admin ? 'Finished per minute, last hour' : null].filter(Boolean),
          q.queues.map((x, i) => [
            h('a', { href: `#/jobs?queue=${encodeURIComponent(x.name)}` }, x.name),
            String(x.queued), String(x.running), String(x.retrying), String(x.waiting ?? 0),
            x.paused ? h('span', { class: 'badge paused' }, 'paused') : 'no',
            admin ? charts[i] : null,
          ].filter((c) => c !== null))));
      const trends = await Promise.all(l.limits.map((k) => (k.adaptive ? trendChart(k.key) : null)));
      replace(keys, h('h2', { id: 'keys-title' }, 'Concurrency keys'),
        l.limits.length === 0 ? h('p', {}, 'No limit is set.') : table(null,
          ['Key', 'In use / limit, then waiting', 'In use', 'Limit', 'Waiting', 'Requests / rpm', 'Tokens / tpm', 'Throttled until', 'Last hour'],
          l.limits.map((k, i) => [
            k.key,
            keyMeter(k),
            String(k.in_use), limitText(k), String(k.waiting || 0),
            budgetText(k.requests_last_minute, k.rpm),
            budgetText(k.tokens_last_minute, k.tpm),
            k.throttled_until ? h('span', { class: 'badge paused' }, time(k.throttled_until)) : '—',
            trends[i] || '—',
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

// limitText is a key's limit, and an adaptive key's effective limit
// before it: "3 of 20" (effective 3 of the limit 20).
function limitText(k) {
  const limit = k.limit === null ? 'none' : String(k.limit);
  return k.effective_limit === null ? limit : `${k.effective_limit} of ${limit}`;
}

// budgetText is a budget's last minute against it, or — for none.
function budgetText(used, budget) {
  return budget === null ? '—' : `${used ?? 0} / ${budget}`;
}

// keyMeter draws a key's leases in use against the limit its claims use
// now (the effective limit of an adaptive key); a key with no concurrency
// limit has none.
function keyMeter(k) {
  const limit = k.effective_limit ?? k.limit;
  if (limit === null) return h('span', { class: 'muted' }, 'no concurrency limit');
  const of = k.effective_limit === null ? `${limit}` : `${limit} (effective)`;
  return meter({ inUse: k.in_use, limit, waiting: k.waiting || 0 },
    `${k.key}: ${k.in_use} of ${of} in use, ${k.waiting || 0} waiting`);
}

// trendChart draws an adaptive key's effective limit and 429s per minute
// over the last hour.
async function trendChart(key) {
  let columns;
  try {
    columns = await limitHistory(key);
  } catch (err) {
    return h('span', { class: 'muted' }, `unavailable (${err.message})`);
  }
  const pushbacks = columns.reduce((n, c) => n + c.values.pushbacks, 0);
  const known = columns.filter((c) => c.effective !== null).map((c) => c.effective);
  const range = known.length ? `effective limit ${Math.min(...known)} to ${Math.max(...known)}, ${known[known.length - 1]} last` : 'no settlement';
  const summary = `${key}, last hour: ${range}, ${pushbacks} 429s`;
  return h('span', { class: 'finishes' }, trend(columns, { width: 180, height: 32, summary }),
    h('span', { class: 'small' }, `${pushbacks} 429s`));
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
