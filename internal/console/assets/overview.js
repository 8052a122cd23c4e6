// Overview: each queue's counts and the last hour's finishes per minute,
// and each concurrency key's leases in use against its (effective) limit,
// its budgets' last minute, its throttle, and for an adaptive key its
// effective limit and 429s over the last hour. It refreshes every 5 s
// while it is shown.
import { allLimits, call, finishes, limitHistory, session } from './api.js';
import { h, replace, table, message, time } from './dom.js';
import { bars, fit, meter } from './chart.js';

const every = 5000;

export const outcomes = [
  { key: 'succeeded', name: 'succeeded' },
  { key: 'failed', name: 'failed' },
  { key: 'cancelled', name: 'cancelled' },
  { key: 'expired', name: 'expired' },
];

export function render(root) {
  const queues = h('section', { 'aria-labelledby': 'queues-title' });
  const finished = h('section', { 'aria-labelledby': 'finished-title', class: 'charts' });
  const keys = h('section', { 'aria-labelledby': 'keys-title' });
  const hours = h('section', { 'aria-labelledby': 'hours-title', class: 'charts' });
  const status = h('p', { class: 'message', role: 'status' });
  root.append(h('h1', {}, 'Overview'), status, queues, finished, keys, hours);

  async function refresh() {
    try {
      const [q, l] = await Promise.all([call('GET', '/v1/queues'), allLimits()]);
      // The finishes count every tenant's jobs: only the admin reads them.
      const charts = session.admin() ? await Promise.all(q.queues.map((queue) => finishChart(queue.name))) : [];
      replace(queues, h('h2', { id: 'queues-title' }, 'Queues'),
        q.queues.length === 0 ? h('p', {}, 'No queue has had a job yet.') : table(null,
          ['Queue', 'Queued', 'Running', 'Retrying', 'Waiting', 'Paused'],
          q.queues.map((x) => [
            h('a', { href: `#/jobs?queue=${encodeURIComponent(x.name)}` }, x.name),
            String(x.queued), String(x.running), String(x.retrying), String(x.waiting ?? 0),
            x.paused ? h('span', { class: 'badge paused' }, 'paused') : 'no',
          ])));
      replace(finished, charts.length ? [h('h2', { id: 'finished-title' }, 'Jobs finished per minute, last hour'), charts] : null);
      const adaptive = l.limits.filter((k) => k.adaptive);
      const trends = await Promise.all(adaptive.map((k) => trendChart(k.key)));
      replace(keys, h('h2', { id: 'keys-title' }, 'Concurrency keys'),
        l.limits.length === 0 ? h('p', {}, 'No limit is set.') : [table(null,
          ['Key', 'Leases in use, then waiting', 'In use', 'Limit (effective of configured)', 'Waiting', 'Requests / rpm', 'Tokens / tpm', 'Throttled until', 'Last hour'],
          l.limits.map((k) => [
            k.key,
            keyMeter(k),
            String(k.in_use), limitText(k), String(k.waiting || 0),
            budgetText(k.requests_last_minute, k.rpm),
            budgetText(k.tokens_last_minute, k.tpm),
            k.throttled_until ? h('span', { class: 'badge paused' }, time(k.throttled_until)) : '—',
            k.adaptive ? trends[adaptive.indexOf(k)].text : '—',
          ])),
        h('p', { class: 'small' }, '“3 of 20”: an adaptive key runs 3 at once now (its effective limit), of the 20 configured; ',
          'it is cut when the upstream pushes back and grows back on successes. Budgets count the last rolling minute.')]);
      replace(hours, trends.length ? [h('h2', { id: 'hours-title' }, 'Adaptive keys, last hour'), trends.map((x) => x.chart)] : null);
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
// over the last hour, and says it in a few words for the table.
async function trendChart(key) {
  let columns;
  try {
    columns = await limitHistory(key);
  } catch (err) {
    const text = h('span', { class: 'muted' }, `unavailable (${err.message})`);
    return { text, chart: null };
  }
  const pushbacks = columns.reduce((n, c) => n + c.values.pushbacks, 0);
  const known = columns.filter((c) => c.effective !== null).map((c) => c.effective);
  const range = known.length ? `effective limit ${Math.min(...known)} to ${Math.max(...known)}, ${known[known.length - 1]} last` : 'no settlement';
  const summary = `${key}, last hour: ${range}, ${pushbacks} 429s`;
  const chart = bars(columns, [{ key: 'pushbacks', name: '429s' }], {
    width: fit(560), height: 220, title: `Key ${key}`, unit: '429s / min', axis: 'minute (UTC)',
    summary, labels: 10, line: { values: columns.map((c) => c.effective), name: 'effective limit' },
  });
  return { text: `${pushbacks} 429s${known.length ? `, effective ${known[known.length - 1]}` : ''}`, chart };
}

// finishChart draws one queue's finishes per minute over the last hour.
async function finishChart(queue) {
  let minutes;
  try {
    minutes = await finishes(queue);
  } catch (err) {
    return h('p', { class: 'muted' }, `${queue}: unavailable (${err.message})`);
  }
  const total = {};
  for (const m of minutes) for (const o of outcomes) total[o.key] = (total[o.key] || 0) + (m.values[o.key] || 0);
  const summary = `${queue}, last hour: ` + outcomes.map((o) => `${total[o.key] || 0} ${o.name}`).join(', ');
  return bars(minutes, outcomes, {
    width: fit(560), height: 220, title: `Queue ${queue}`, unit: 'jobs / min', axis: 'minute (UTC)', summary, labels: 10,
  });
}
