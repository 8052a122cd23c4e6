// Jobs: the caller's jobs (the admin's: every tenant's), newest first,
// filtered by state, kind, queue (and tenant, for the admin), a page at a
// time; and a search by id. The filters live in the address, so a
// filtered list can be linked to and the back button works.
import { call, query, session } from './api.js';
import { h, badge, field, message, select, table, time } from './dom.js';

export const states = ['queued', 'running', 'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired'];

export function render(root, params) {
  const admin = session.admin();
  const filters = {
    state: params.get('state') || '',
    kind: params.get('kind') || '',
    queue: params.get('queue') || '',
    tenant: admin ? params.get('tenant') || '' : '',
  };
  const status = h('p', { class: 'message', role: 'status' });
  const list = h('div');

  const idInput = h('input', { name: 'id', required: true, autocomplete: 'off', spellcheck: 'false' });
  const search = h('form', { class: 'row', role: 'search', 'aria-label': 'Find a job by id' },
    field('Job id', idInput), h('button', { type: 'submit' }, 'Open job'));
  search.addEventListener('submit', (ev) => {
    ev.preventDefault();
    window.location.hash = `#/jobs/${encodeURIComponent(idInput.value.trim())}`;
  });

  const filter = h('form', { class: 'row', 'aria-label': 'Filter jobs' },
    field('State', select('state', [['', 'any'], ...states], filters.state)),
    field('Kind', h('input', { name: 'kind', value: filters.kind, autocomplete: 'off' })),
    field('Queue', h('input', { name: 'queue', value: filters.queue, autocomplete: 'off' })),
    admin ? field('Tenant', h('input', { name: 'tenant', value: filters.tenant, autocomplete: 'off', placeholder: 'every tenant' })) : null,
    h('button', { type: 'submit' }, 'Filter'));
  filter.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = Object.fromEntries(new FormData(filter));
    window.location.hash = `#/jobs${query(f)}`;
  });

  root.append(h('h1', {}, 'Jobs'), search, filter, status, list);

  call('GET', `/v1/jobs${query({ ...filters, cursor: params.get('cursor'), limit: 50 })}`).then((page) => {
    // State first: on a narrow screen the columns after the id scroll away.
    const rows = page.jobs.map((j) => [
      badge(j.state),
      h('a', { href: `#/jobs/${encodeURIComponent(j.id)}`, class: 'mono' }, j.id),
      j.kind, j.queue, admin ? j.tenant : null, `${j.attempt} / ${j.max_attempts}`, time(j.created_at),
    ].filter((c) => c !== null));
    const headings = ['State', 'Id', 'Kind', 'Queue', admin ? 'Tenant' : null, 'Attempts', 'Created (UTC)'].filter(Boolean);
    list.append(page.jobs.length === 0 ? h('p', {}, 'No job matches.') : table(null, headings, rows));
    const nav = h('p', { class: 'row' });
    if (params.get('cursor')) nav.append(h('a', { href: `#/jobs${query(filters)}` }, '« First page'));
    if (page.next_cursor) nav.append(h('a', { href: `#/jobs${query({ ...filters, cursor: page.next_cursor })}` }, 'Next page »'));
    list.append(nav);
  }).catch((err) => message(status, `Could not list jobs: ${err.message}`, 'error'));
}
