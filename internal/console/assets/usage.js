// Usage: a tenant's counts per UTC day over a date range, one counter at
// a time as a chart, every counter in a table below it.
import { call, query, session } from './api.js';
import { h, field, message, select, table } from './dom.js';
import { bars, fit } from './chart.js';

const counters = [
  'jobs_submitted', 'executions_started', 'executions_succeeded', 'executions_failed',
  'executions_cancelled', 'llm_prompt_tokens', 'llm_completion_tokens',
];

const day = (d) => d.toISOString().slice(0, 10);

export function render(root, params) {
  const today = new Date();
  const from = params.get('from') || day(new Date(today.getTime() - 13 * 86400000));
  const to = params.get('to') || day(today);
  const counter = params.get('counter') || counters[0];
  const tenant = session.admin() ? params.get('tenant') || '' : '';

  const form = h('form', { class: 'row', 'aria-label': 'Usage range' },
    field('From', h('input', { type: 'date', name: 'from', value: from, required: true })),
    field('To', h('input', { type: 'date', name: 'to', value: to, required: true })),
    field('Counter', select('counter', counters, counter)),
    session.admin() ? field('Tenant', h('input', { name: 'tenant', value: tenant, placeholder: 'admin', autocomplete: 'off' })) : null,
    h('button', { type: 'submit' }, 'Show'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    window.location.hash = `#/usage${query(Object.fromEntries(new FormData(form)))}`;
  });
  const status = h('p', { class: 'message', role: 'status' });
  const out = h('div');
  root.append(h('h1', {}, 'Usage'), form, status, out);

  call('GET', `/v1/usage${query({ from, to, tenant })}`).then((u) => {
    const names = [...new Set([...counters, ...u.days.flatMap((d) => Object.keys(d.counts))])];
    const total = u.days.reduce((n, d) => n + (d.counts[counter] || 0), 0);
    const columns = u.days.map((d) => ({ label: d.date.slice(5), values: { v: d.counts[counter] || 0 } }));
    const width = fit(1100); // a label every 48 px at most
    out.append(
      h('h2', {}, `${counter} for ${u.tenant}, ${u.from} to ${u.to}: ${total}`),
      bars(columns, [{ key: 'v', name: counter }], {
        width, height: 240, title: `${counter} per day`, unit: counter.startsWith('llm_') ? 'tokens / day' : 'count / day',
        axis: 'day (UTC, month-day)', labels: Math.ceil(u.days.length / (width / 48)), className: 'panel',
        summary: `${counter} per day for ${u.tenant}, ${u.from} to ${u.to}: ${total} in all`,
      }),
      table('Every counter, per day', ['Day', ...names],
        u.days.map((d) => [d.date, ...names.map((n) => String(d.counts[n] || 0))])));
  }).catch((err) => message(status, `Could not load usage: ${err.message}`, 'error'));
}
