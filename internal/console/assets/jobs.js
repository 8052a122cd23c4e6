// Jobs: the caller's jobs (the admin's: every tenant's), newest first,
// filtered by state, kind, queue (and tenant, for the admin), a page at a
// time; and a search by id. The filters live in the address, so a
// filtered list can be linked to and the back button works. The page
// follows changes by reading the list again every 2 s while the tab is
// visible, and acts on the jobs selected on it: cancel, retry, delete.
import { call, query, session } from './api.js';
import { h, badge, field, message, replace, select, table, time } from './dom.js';

const every = 2000;

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

  const selected = new Set();
  let jobs = [];
  let nextCursor = null;
  let drawn = ''; // the page as last drawn: it is drawn again only when it changed
  let reading = false;
  let acting = false; // a bulk action runs: the buttons wait for it
  const summary = h('section', { id: 'bulk-summary', role: 'status', 'aria-label': 'What the last action did' });
  const count = h('span', { class: 'muted', id: 'selected-count' });
  const buttons = {
    cancel: h('button', { type: 'button', id: 'cancel-selected', onclick: () => bulk('Cancel', cancelOne) }, 'Cancel selected'),
    retry: h('button', { type: 'button', id: 'retry-selected', onclick: () => bulk('Retry', retryOne) }, 'Retry selected'),
    delete: h('button', { type: 'button', id: 'delete-selected', class: 'danger', onclick: () => remove() }, 'Delete selected'),
  };
  const all = h('input', {
    type: 'checkbox', id: 'select-all',
    onchange: () => {
      for (const j of jobs) if (all.checked) selected.add(j.id); else selected.delete(j.id);
      showSelection();
    },
  });
  const toolbar = h('div', { class: 'row actions', role: 'group', 'aria-label': 'Selected jobs' },
    h('label', { class: 'check' }, all, 'Select all on this page'), buttons.cancel, buttons.retry, buttons.delete, count);

  root.append(h('h1', {}, 'Jobs'), search, filter, status, toolbar, summary, list);

  // showSelection shows what is selected without drawing the rows again,
  // so a checkbox keeps the focus.
  function showSelection() {
    all.checked = jobs.length > 0 && selected.size === jobs.length;
    all.indeterminate = selected.size > 0 && selected.size < jobs.length;
    for (const box of list.querySelectorAll('tbody input[type=checkbox]')) box.checked = selected.has(box.value);
    count.textContent = `${selected.size} selected`;
    for (const b of Object.values(buttons)) b.disabled = acting || selected.size === 0;
  }

  function draw() {
    for (const id of selected) if (!jobs.some((j) => j.id === id)) selected.delete(id);
    const rows = jobs.map((j) => [
      h('input', {
        type: 'checkbox', value: j.id, 'aria-label': `Select job ${j.id}`,
        onchange: (ev) => {
          if (ev.target.checked) selected.add(j.id); else selected.delete(j.id);
          showSelection();
        },
      }),
      badge(j.state),
      h('a', { href: `#/jobs/${encodeURIComponent(j.id)}`, class: 'mono' }, j.id),
      j.kind, j.queue, admin ? j.tenant : null, `${j.attempt} of ${j.max_attempts}`, time(j.created_at),
    ].filter((c) => c !== null));
    const headings = ['Select', 'State', 'Id', 'Kind', 'Queue', admin ? 'Tenant' : null, 'Attempts spent of allowed', 'Created'].filter(Boolean);
    const nav = h('p', { class: 'row' });
    if (params.get('cursor')) nav.append(h('a', { href: `#/jobs${query(filters)}` }, '« First page'));
    if (nextCursor) nav.append(h('a', { href: `#/jobs${query({ ...filters, cursor: nextCursor })}` }, 'Next page »'));
    replace(list, jobs.length === 0 ? h('p', {}, 'No job matches.') : table(null, headings, rows, (i) => ({ 'data-id': jobs[i].id })), nav);
    showSelection();
  }

  async function refresh() {
    if (document.hidden || reading) return;
    reading = true;
    try {
      const page = await call('GET', `/v1/jobs${query({ ...filters, cursor: params.get('cursor'), limit: 50 })}`);
      const seen = JSON.stringify(page);
      if (seen !== drawn) {
        drawn = seen;
        jobs = page.jobs;
        nextCursor = page.next_cursor;
        draw();
      }
      if (status.classList.contains('error')) message(status, '');
    } catch (err) {
      message(status, `Could not list jobs: ${err.message}`, 'error');
    } finally {
      reading = false;
    }
  }

  // bulk runs action on each selected job, one after another, and lists
  // what happened to each.
  async function bulk(verb, action) {
    const ids = jobs.filter((j) => selected.has(j.id)).map((j) => j.id);
    acting = true;
    showSelection();
    const outcomes = [];
    for (const id of ids) {
      try {
        outcomes.push({ id, ok: true, text: await action(`/v1/jobs/${encodeURIComponent(id)}`) });
      } catch (err) {
        outcomes.push({ id, ok: false, text: `refused: ${err.message}` });
      }
    }
    const done = outcomes.filter((o) => o.ok).length;
    replace(summary,
      h('p', { class: `message ${done === ids.length ? 'ok' : 'error'}` },
        `${verb}: ${done} of ${ids.length} job${ids.length === 1 ? '' : 's'} done${done < ids.length ? `, ${ids.length - done} refused` : ''}.`),
      h('ul', { class: 'outcomes' }, outcomes.map((o) => h('li', { 'data-id': o.id, class: o.ok ? '' : 'refused' },
        h('a', { href: `#/jobs/${encodeURIComponent(o.id)}`, class: 'mono' }, o.id), ` ${o.text}`))));
    acting = false;
    drawn = '';
    showSelection();
    refresh();
  }

  // Deleting cannot be undone, so it takes a second click within 5 s.
  let armed = null;
  function remove() {
    if (!armed) {
      buttons.delete.textContent = `Click again to delete ${selected.size}`;
      armed = setTimeout(disarm, 5000);
      return;
    }
    disarm();
    bulk('Delete', deleteOne);
  }
  function disarm() {
    clearTimeout(armed);
    armed = null;
    buttons.delete.textContent = 'Delete selected';
  }

  const onVisible = () => refresh();
  document.addEventListener('visibilitychange', onVisible);
  refresh();
  const timer = setInterval(refresh, every);
  return () => {
    clearInterval(timer);
    disarm();
    document.removeEventListener('visibilitychange', onVisible);
  };
}

async function cancelOne(path) {
  const j = await call('POST', `${path}/cancel`);
  return j.state === 'cancelled' ? 'cancelled' : 'cancel requested: its worker stops it';
}

async function retryOne(path) {
  await call('POST', `${path}/retry`);
  return 'queued again';
}

async function deleteOne(path) {
  await call('DELETE', path);
  return 'deleted';
}
