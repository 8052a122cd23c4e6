// Admin (the admin tenant only): concurrency limits and upstream budgets,
// pausing and resuming queues, and retrying every ended job that matches a
// filter.
import { allLimits, call, retryMatching } from './api.js';
import { h, field, message, replace, select, table, time } from './dom.js';

export function render(root) {
  const status = h('p', { class: 'message', role: 'status', id: 'admin-status' });
  const limits = h('section', { 'aria-labelledby': 'limits-title' });
  const queues = h('section', { 'aria-labelledby': 'aq-title' });
  root.append(h('h1', {}, 'Admin'), status, queues, limits, bulkRetry(status));

  async function act(what, method, path, body) {
    try {
      await call(method, path, body);
      message(status, what);
    } catch (err) {
      message(status, `${what.replace(/\.$/, '')} failed: ${err.message}`, 'error');
    }
    refresh();
  }

  async function refresh() {
    try {
      const [q, l] = await Promise.all([call('GET', '/v1/queues'), allLimits()]);
      replace(queues, h('h2', { id: 'aq-title' }, 'Queues'), table(null, ['Queue', 'Queued', 'Running', 'State', 'Action'],
        q.queues.map((x) => {
          const verb = x.paused ? 'resume' : 'pause';
          const name = encodeURIComponent(x.name);
          return [x.name, String(x.queued), String(x.running),
            x.paused ? h('span', { class: 'badge paused' }, 'paused') : 'serving',
            h('button', {
              type: 'button', 'data-queue': x.name, 'aria-label': `${x.paused ? 'Resume' : 'Pause'} queue ${x.name}`,
              onclick: () => act(`Queue ${x.name} ${x.paused ? 'resumed' : 'paused'}.`, 'POST', `/v1/queues/${name}/${verb}`),
            }, x.paused ? 'Resume' : 'Pause')];
        })));

      replace(limits, h('h2', { id: 'limits-title' }, 'Limits and budgets'),
        h('p', { class: 'muted', id: 'limits-help' }, 'Limit is the concurrency you configure. An adaptive key runs at its ',
          'effective limit instead: cut when the upstream pushes back (429), grown back on successes, never above the configured limit.'),
        l.limits.length === 0 ? h('p', {}, 'No limit is set.') : table(null,
          ['Key', 'In use', 'Waiting', 'Limit', 'Requests per minute', 'Tokens per minute', 'Per tenant', 'Adaptive', 'Throttled until', 'Actions'],
          l.limits.map((x, i) => limitRow(x, `limit-${i}`, act, status)), (i) => ({ 'data-key': l.limits[i].key })),
        h('p', { class: 'small' }, 'Budgets count per rolling minute, fleet-wide. Per tenant is the most slots one tenant may hold, and its share ',
          'of the budgets. Save changes only the fields you changed; an emptied field removes that setting.'),
        addLimit(act));
    } catch (err) {
      message(status, `Could not load: ${err.message}`, 'error');
    }
  }
  refresh();
}

// The settings of a key a number sets, as the API names them.
const numbers = [['limit', 'Limit'], ['rpm', 'Requests per minute'], ['tpm', 'Tokens per minute'], ['per_tenant', 'Per tenant']];

// limitRow is a key's cells: what it uses now beside inputs for its
// settings, and a Save that sends a JSON merge patch of the settings
// changed (null removes one), so what the form does not touch stays.
function limitRow(x, form, act, status) {
  const inputs = Object.fromEntries(numbers.map(([name, label]) => [name, h('input', {
    type: 'number', min: 0, step: 1, name, form, value: x[name] ?? '', 'aria-label': `${label} of ${x.key}`,
  })]));
  const adaptive = h('input', { type: 'checkbox', name: 'adaptive', form, checked: x.adaptive, 'aria-label': `Adaptive ${x.key}` });
  const save = h('form', { id: form, class: 'actions' },
    h('button', { type: 'submit', 'aria-label': `Save the limit of ${x.key}` }, 'Save'),
    h('button', {
      type: 'button', class: 'danger', 'aria-label': `Remove the limit of ${x.key}`,
      onclick: () => act(`Limit of ${x.key} removed.`, 'DELETE', `/v1/limits/${encodeURIComponent(x.key)}`),
    }, 'Remove'));
  save.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const patch = {};
    for (const [name] of numbers) {
      const v = inputs[name].value === '' ? null : Number(inputs[name].value);
      if (v !== x[name]) patch[name] = v;
    }
    if (adaptive.checked !== x.adaptive) patch.adaptive = adaptive.checked;
    const changes = Object.entries(patch).map(([k, v]) => (v === null ? `${k} removed` : `${k} set to ${v}`));
    if (changes.length === 0) {
      message(status, `Limit of ${x.key}: nothing changed.`);
      return;
    }
    act(`Limit of ${x.key}: ${changes.join(', ')}.`, 'PATCH', `/v1/limits/${encodeURIComponent(x.key)}`, patch);
  });
  const used = (n) => h('span', { class: 'small' }, `${n ?? 0} in the last minute`);
  return [x.key, String(x.in_use), String(x.waiting || 0),
    h('span', { class: 'setting' }, inputs.limit,
      x.effective_limit === null ? null : h('span', { class: 'small' }, `effective ${x.effective_limit}`)),
    h('span', { class: 'setting' }, inputs.rpm, x.rpm === null ? null : used(x.requests_last_minute)),
    h('span', { class: 'setting' }, inputs.tpm, x.tpm === null ? null : used(x.tokens_last_minute)),
    inputs.per_tenant, adaptive,
    x.throttled_until ? h('span', { class: 'badge paused' }, time(x.throttled_until)) : '—',
    save];
}

// addLimit is the form that sets a key's whole configuration (PUT): the
// fields left empty are not set.
function addLimit(act) {
  const form = h('form', { class: 'row', 'aria-label': 'Set a limit' },
    field('Key', h('input', { name: 'key', required: true, autocomplete: 'off', placeholder: 'model:gpt-4o' })),
    numbers.map(([name, label]) => field(label, h('input', { name, type: 'number', min: 0, step: 1 }))),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'adaptive' }), 'Adaptive'),
    h('button', { type: 'submit' }, 'Set limit'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    const key = data.get('key').trim();
    const body = {};
    for (const [name] of numbers) if (data.get(name) !== '') body[name] = Number(data.get(name));
    if (data.get('adaptive')) body.adaptive = true;
    act(`Limit of ${key} set.`, 'PUT', `/v1/limits/${encodeURIComponent(key)}`, body);
  });
  return form;
}

// bulkRetry is the form that sends every ended job matching a filter back
// to its queue. Running it twice moves nothing the second time.
function bulkRetry(status) {
  const form = h('form', { class: 'row', 'aria-labelledby': 'bulk-title' },
    field('State', select('state', ['failed', 'cancelled', 'expired'], 'failed')),
    field('Kind', h('input', { name: 'kind', autocomplete: 'off', placeholder: 'any' })),
    field('Queue', h('input', { name: 'queue', autocomplete: 'off', placeholder: 'any' })),
    field('Tenant', h('input', { name: 'tenant', autocomplete: 'off', placeholder: 'every tenant' })),
    h('button', { type: 'submit' }, 'Retry matching jobs'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const filter = Object.fromEntries([...new FormData(form)].filter(([, v]) => v !== ''));
    try {
      const n = await retryMatching(filter);
      message(status, `Bulk retry: ${n} job${n === 1 ? '' : 's'} queued again.`);
    } catch (err) {
      message(status, `Bulk retry failed: ${err.message}`, 'error');
    }
  });
  return h('section', {}, h('h2', { id: 'bulk-title' }, 'Retry ended jobs in bulk'),
    h('p', {}, 'Sends every job that matches back to its queue, with its id and events kept. Safe to run twice.'), form);
}
