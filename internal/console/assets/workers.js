// Workers: the live workers, each with the queues and kinds it serves, how
// many jobs it runs now, when it started and when it last sent a
// heartbeat. The admin sees every worker; a tenant sees the workers that
// run its jobs now, each under the name its jobs' runs show, with no host
// and a count of its own jobs only (the API's view of a tenant). It
// refreshes every 5 s while it is shown.
import { call, session } from './api.js';
import { h, message, replace, table, time } from './dom.js';

const every = 5000;

export function render(root) {
  const admin = session.admin();
  const status = h('p', { class: 'message', role: 'status', id: 'workers-status' });
  const list = h('section', { 'aria-labelledby': 'workers-title' });
  root.append(h('h1', { id: 'workers-title' }, 'Workers'),
    h('p', { class: 'muted' }, admin ? 'Every live worker.' : 'The live workers that run your jobs now.',
      ' A worker claims only jobs of the queues and kinds it serves; one that stops sending heartbeats leaves the list.'),
    status, list);

  async function refresh() {
    try {
      const { workers } = await call('GET', '/v1/workers');
      replace(list, workers.length === 0 ? h('p', {}, 'No live worker.') : table(null,
        ['Id', ...(admin ? ['Host'] : []), 'Queues', 'Kinds', admin ? 'Running' : 'Your jobs running', 'Started', 'Last heartbeat'],
        workers.map((w) => [
          h('span', { class: 'mono' }, w.id), ...(admin ? [w.host] : []), w.queues.join(', '),
          h('span', { class: 'wrap' }, w.kinds.join(', ')), String(w.running),
          time(w.started_at), `${time(w.heartbeat_at)} (${ago(w.heartbeat_at)})`,
        ]), (i) => ({ 'data-id': workers[i].id })));
      message(status, '');
    } catch (err) {
      message(status, `Could not list workers: ${err.message}`, 'error');
    }
  }
  refresh();
  const timer = setInterval(refresh, every);
  return () => clearInterval(timer);
}

// ago says how long ago t was, in whole seconds.
function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(t)) / 1000));
  return `${s} s ago`;
}
