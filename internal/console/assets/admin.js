// Admin (the admin tenant only): concurrency limits, pausing and resuming
// queues, and retrying every ended job that matches a filter.
import { allLimits, call, retryMatching } from './api.js';
import { h, field, message, replace, select, table } from './dom.js';

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

      const key = h('input', { name: 'key', required: true, autocomplete: 'off', placeholder: 'model:gpt-4o' });
      const n = h('input', { name: 'limit', type: 'number', min: 0, required: true });
      const add = h('form', { class: 'row', 'aria-label': 'Set a limit' }, field('Key', key), field('Limit', n), h('button', { type: 'submit' }, 'Set limit'));
      add.addEventListener('submit', (ev) => {
        ev.preventDefault();
        act(`Limit of ${key.value} set to ${n.value}.`, 'PATCH', `/v1/limits/${encodeURIComponent(key.value)}`, { limit: Number(n.value) });
      });
      replace(limits, h('h2', { id: 'limits-title' }, 'Concurrency limits'),
        l.limits.length === 0 ? h('p', {}, 'No limit is set.') : table(null, ['Key', 'In use', 'Waiting', 'Limit', 'Remove'],
          l.limits.map((x) => {
            const input = h('input', { type: 'number', min: 0, value: x.limit, required: true, 'aria-label': `Limit of ${x.key}` });
            const form = h('form', { class: 'inline' }, input, h('button', { type: 'submit', 'aria-label': `Save the limit of ${x.key}` }, 'Save'));
            form.addEventListener('submit', (ev) => {
              ev.preventDefault();
              act(`Limit of ${x.key} set to ${input.value}.`, 'PATCH', `/v1/limits/${encodeURIComponent(x.key)}`, { limit: Number(input.value) });
            });
            return [x.key, String(x.in_use), String(x.waiting || 0), form,
              h('button', {
                type: 'button', class: 'danger', 'aria-label': `Remove the limit of ${x.key}`,
                onclick: () => act(`Limit of ${x.key} removed.`, 'DELETE', `/v1/limits/${encodeURIComponent(x.key)}`),
              }, 'Remove')];
          })),
        add);
    } catch (err) {
      message(status, `Could not load: ${err.message}`, 'error');
    }
  }
  refresh();
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
