// Schedules: the caller's schedules with their next and last run and the
// job each fired last, and the actions on each: pause or resume, trigger
// (fire once now) and delete.
import { call } from './api.js';
import { h, message, replace, table, time } from './dom.js';

export function render(root) {
  const status = h('p', { class: 'message', role: 'status', id: 'schedules-status' });
  const list = h('section', { 'aria-labelledby': 'schedules-title' });
  root.append(h('h1', { id: 'schedules-title' }, 'Schedules'), status, list);

  async function act(what, method, path) {
    try {
      const answer = await call(method, path);
      message(status, what(answer));
    } catch (err) {
      message(status, `Failed: ${err.message}`, 'error');
    }
    refresh();
  }

  async function refresh() {
    try {
      const { schedules } = await call('GET', '/v1/schedules');
      replace(list, schedules.length === 0 ? h('p', {}, 'No schedule yet: create one with POST /v1/schedules or leasehold schedules create.') :
        table(null, ['Name', 'Cron', 'Next run', 'Last run', 'Last job', 'State', 'Actions'], schedules.map((x) => {
          const path = `/v1/schedules/${encodeURIComponent(x.name)}`;
          const verb = x.paused ? 'resume' : 'pause';
          return [x.name, `${x.cron} (${x.timezone})`, time(x.next_run_at), time(x.last_run_at),
            x.last_job_id ? h('a', { href: `#/jobs/${encodeURIComponent(x.last_job_id)}` }, x.last_job_id.slice(0, 8)) : '—',
            x.paused ? h('span', { class: 'badge paused' }, 'paused') : (x.overlap === 'skip' ? 'active, skips overlaps' : 'active'),
            h('span', { class: 'actions' },
              h('button', {
                type: 'button', 'aria-label': `${x.paused ? 'Resume' : 'Pause'} schedule ${x.name}`,
                onclick: () => act(() => `Schedule ${x.name} ${x.paused ? 'resumed' : 'paused'}.`, 'POST', `${path}/${verb}`),
              }, x.paused ? 'Resume' : 'Pause'),
              h('button', {
                type: 'button', 'aria-label': `Trigger schedule ${x.name}`,
                onclick: () => act((j) => `Schedule ${x.name} fired job ${j.id}.`, 'POST', `${path}/trigger`),
              }, 'Trigger'),
              h('button', {
                type: 'button', class: 'danger', 'aria-label': `Delete schedule ${x.name}`,
                onclick: () => act(() => `Schedule ${x.name} deleted.`, 'DELETE', path),
              }, 'Delete'))];
        })));
    } catch (err) {
      message(status, `Could not load: ${err.message}`, 'error');
    }
  }
  refresh();
  const timer = setInterval(refresh, 5000);
  return () => clearInterval(timer);
}
