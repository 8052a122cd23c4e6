// A job's page: its fields and input, its attempts, its events as they happen
// (state changes, progress, output text), the buttons to cancel, retry
// and delete it, while it waits what for and a form to signal it, and the
// tries of its webhook. Everything the job carries came from a tenant and
// is shown as text.
import { call, follow, isTerminal, ApiError } from './api.js';
import { h, badge, json, message, replace, table, time } from './dom.js';

const maxEvents = 500; // the events list keeps the latest; output is kept whole

export function render(root, id) {
  let job = null;
  let last = ''; // the last event id seen, to resume from after a retry
  let streaming = false;
  const attempts = []; // {attempt, started, ended, outcome}, from state events
  const stop = new AbortController();

  const title = h('h1', {}, 'Job ', h('span', { class: 'mono' }, id));
  const state = h('span', { id: 'state' });
  const live = h('span', { class: 'muted', id: 'stream-status' });
  const status = h('p', { class: 'message', role: 'status' });
  const cancelBtn = h('button', { type: 'button', id: 'cancel' }, 'Cancel');
  const retryBtn = h('button', { type: 'button', id: 'retry' }, 'Retry');
  const deleteBtn = h('button', { type: 'button', id: 'delete', class: 'danger' }, 'Delete');
  // The signal form: only a caller who can see the job (its owner or the
  // admin) gets this far; the API checks again.
  const waitInfo = h('p', { id: 'waiting-for' });
  const signalName = h('input', { name: 'name', id: 'signal-name', required: true, pattern: '[a-z0-9][a-z0-9_.:\\-]{0,63}' });
  const signalData = h('textarea', { name: 'data', id: 'signal-data', rows: 3, placeholder: '{"approved": true}' });
  const signalForm = h('form', { id: 'signal', class: 'stack', hidden: true, 'aria-labelledby': 'signal-title' },
    h('h2', { id: 'signal-title' }, 'Waiting for a signal'), waitInfo,
    h('label', { class: 'field' }, h('span', {}, 'Signal name'), signalName),
    h('label', { class: 'field' }, h('span', {}, 'Data (JSON, optional)'), signalData),
    h('button', { type: 'submit', id: 'send-signal' }, 'Send signal'));
  const fields = h('dl', { class: 'fields' });
  const progress = h('div', { id: 'progress' }, '—');
  const output = h('pre', { id: 'output', class: 'output', tabindex: 0, 'aria-label': 'Output text' });
  const result = h('pre', { id: 'result', tabindex: 0, 'aria-label': 'Result' });
  const error = h('pre', { id: 'error', tabindex: 0, 'aria-label': 'Error' });
  const attemptList = h('div', { id: 'attempts' });
  const events = h('ol', { id: 'events', class: 'events' });
  const hook = h('div', { id: 'webhook' });
  let polling = null; // the timer of the next read of a pending webhook

  root.append(title,
    h('p', { class: 'row' }, state, live),
    h('div', { class: 'row actions', role: 'group', 'aria-label': 'Actions' }, cancelBtn, retryBtn, deleteBtn),
    status,
    signalForm,
    h('div', { class: 'columns' },
      h('section', { 'aria-labelledby': 'fields-title' }, h('h2', { id: 'fields-title' }, 'Fields'), fields),
      h('section', { 'aria-labelledby': 'run-title' },
        h('h2', { id: 'run-title' }, 'Progress'), progress,
        h('h2', {}, 'Output'), output,
        h('h2', {}, 'Result'), result,
        h('h2', {}, 'Error'), error)),
    h('section', { 'aria-labelledby': 'attempts-title' }, h('h2', { id: 'attempts-title' }, 'Attempts'), attemptList),
    h('section', { 'aria-labelledby': 'webhook-title' }, h('h2', { id: 'webhook-title' }, 'Webhook'), hook),
    h('section', { 'aria-labelledby': 'events-title' }, h('h2', { id: 'events-title' }, 'Events'), events));

  function show(j) {
    job = j;
    replace(state, badge(j.state), j.cancel_requested && !isTerminal(j.state) ? ' cancel requested' : '');
    const ended = isTerminal(j.state);
    cancelBtn.disabled = ended || j.cancel_requested;
    retryBtn.disabled = !['failed', 'cancelled', 'expired'].includes(j.state);
    deleteBtn.disabled = !ended;
    const w = j.state === 'waiting' ? j.waiting_for : null;
    signalForm.hidden = !w;
    if (w) {
      waitInfo.textContent = `Waiting for the signal “${w.name}” until ${time(w.until)}; then it resumes, told that the wait timed out.`;
      if (!signalName.value) signalName.value = w.name;
    }
    const rows = [
      ['Tenant', j.tenant], ['Queue', j.queue], ['Kind', j.kind], ['State', j.state],
      ['Attempts spent of allowed', `${j.attempt} of ${j.max_attempts}`], ['Priority', String(j.priority)],
      ['Concurrency keys', (j.concurrency_keys || []).join(', ') || '—'],
      ['Created', time(j.created_at)], ['Started', time(j.started_at)], ['Finished', time(j.finished_at)],
      ['Cancel requested', j.cancel_requested ? 'yes' : 'no'],
      ['Waiting for', w ? `${w.name} until ${time(w.until)}` : '—'],
      ['Input', h('pre', { id: 'input' }, json(j.input))],
      ['Checkpoint', h('pre', { id: 'checkpoint' }, json(j.checkpoint))],
      ['Metadata', h('pre', {}, json(j.metadata))],
    ];
    replace(fields, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    result.textContent = json(j.result);
    error.textContent = j.error ? `${j.error.code}: ${j.error.message}` : '—';
    showAttempts();
    showWebhook(j);
  }

  // The webhook's tries come after the job's last event (they add none to
  // its stream): while its delivery is pending after the end, the page
  // reads the job again every few seconds.
  function showWebhook(j) {
    const w = j.webhook;
    if (!w) {
      replace(hook, h('p', {}, 'None.'));
      return;
    }
    const rows = (w.tries || []).map((t) => [time(t.at), t.status ? String(t.status) : '—',
      t.error ? h('span', { class: 'wrap' }, t.error) : '—']);
    replace(hook,
      h('p', {}, h('span', { class: 'mono wrap' }, w.url), ' ', badge(w.state), ` ${w.attempts} ${w.attempts === 1 ? 'try' : 'tries'}`),
      rows.length ? table(null, ['Tried', 'Status', 'Error'], rows) : h('p', {}, isTerminal(j.state) ? 'Not tried yet.' : 'Sent when the job ends.'));
    clearTimeout(polling);
    if (isTerminal(j.state) && w.state === 'pending' && !stop.signal.aborted) {
      polling = setTimeout(() => call('GET', base).then((fresh) => {
        if (isTerminal(fresh.state)) show(fresh);
      }).catch(() => {}), 3000);
    }
  }

  // Attempts come from the state events: each "running" starts one, the
  // next state event ends it with its outcome. The job object names the
  // worker, fencing token and error of its latest execution only.
  function showAttempts() {
    if (attempts.length === 0) {
      replace(attemptList, h('p', {}, 'Not started yet.'));
      return;
    }
    const ex = job && job.execution;
    const rows = attempts.map((a, i) => {
      const latest = i === attempts.length - 1 && ex;
      const failed = a.outcome && a.outcome !== 'succeeded' && a.outcome !== 'running';
      return [
        String(a.attempt),
        latest ? ex.worker : '—',
        latest ? String(ex.fencing_token) : '—',
        time(latest ? ex.started_at : a.started),
        time(latest && ex.finished_at ? ex.finished_at : a.ended),
        a.outcome ? badge(a.outcome) : badge('running'),
        latest && failed && job.error ? h('span', { class: 'wrap' }, `${job.error.code}: ${job.error.message}`) : '—',
      ];
    });
    replace(attemptList, table(null, ['Attempt', 'Worker', 'Fencing token', 'Started', 'Ended', 'Outcome', 'Error'], rows));
  }

  function onEvent(e) {
    const at = eventTime(e.id);
    if (e.type === 'output') {
      output.append(document.createTextNode(e.data && typeof e.data.text === 'string' ? e.data.text : ''));
      return;
    }
    if (e.type === 'state' && e.data && e.data.state) {
      const open = attempts[attempts.length - 1];
      if (open && !open.outcome) {
        open.outcome = e.data.state === 'running' ? 'handed back' : e.data.state;
        open.ended = at;
      }
      if (e.data.state === 'running') attempts.push({ attempt: e.data.attempt, started: at });
      show(e.data);
    }
    if (e.type === 'progress') showProgress(e.data);
    events.append(h('li', {}, h('span', { class: 'mono' }, time(at)), ' ', h('strong', {}, e.type), ' ', summary(e)));
    while (events.childElementCount > maxEvents) events.firstElementChild.remove();
  }

  function showProgress(d) {
    const done = d && (d.done ?? null);
    const total = d && (d.total ?? null);
    if (typeof done === 'number' && typeof total === 'number' && total > 0) {
      replace(progress, h('progress', { max: total, value: done, 'aria-label': 'Progress' }), ` ${done} of ${total}`);
    } else if (d && typeof d.percent === 'number') {
      replace(progress, h('progress', { max: 100, value: d.percent, 'aria-label': 'Progress' }), ` ${d.percent}%`);
    } else {
      replace(progress, JSON.stringify(d));
    }
  }

  async function stream() {
    if (streaming) return;
    streaming = true;
    try {
      last = await follow(id, {
        after: last, onEvent, signal: stop.signal,
        onStatus: (s) => { live.textContent = s === 'live' ? '● following live' : s === 'ended' ? 'ended' : 'reconnecting…'; },
      });
    } catch (err) {
      live.textContent = '';
      message(status, `Events: ${err.message}`, 'error');
    } finally {
      streaming = false;
    }
  }

  async function act(label, method, path, done) {
    try {
      const j = await call(method, path);
      done(j);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409 && err.problem.id) show(err.problem); // a conflict carries the job
      message(status, `${label} refused: ${err.message}`, 'error');
    }
  }

  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  cancelBtn.addEventListener('click', () => act('Cancel', 'POST', `${base}/cancel`, (j) => {
    // The worker may stop the job before this answer arrives, and the
    // stream show it ended: the job as of the request must not undo that.
    if (!job || !isTerminal(job.state)) show(j);
    message(status, j.state === 'cancelled' ? 'Cancelled.' : 'Cancel requested: the worker stops it now.');
  }));
  signalForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { name: signalName.value.trim() };
    const text = signalData.value.trim();
    if (text) {
      try {
        body.data = JSON.parse(text);
      } catch {
        message(status, 'Signal refused: the data is not JSON.', 'error');
        return;
      }
    }
    try {
      const j = await call('POST', `${base}/signal`, body);
      if (!job || job.state === 'waiting' || !isTerminal(job.state)) show(j);
      message(status, j.state === 'waiting' ? `Signal “${body.name}” kept for a later wait.` : 'Signal sent: the job is queued again.');
    } catch (err) {
      if (err instanceof ApiError && err.status === 409 && err.problem.id) show(err.problem);
      message(status, `Signal refused: ${err.message}`, 'error');
    }
  });
  retryBtn.addEventListener('click', () => act('Retry', 'POST', `${base}/retry`, (j) => {
    show(j);
    message(status, 'Queued again.');
    stream(); // the last stream ended with the job; this one follows the new attempts
  }));
  // Deleting cannot be undone, so it takes a second click within 5 s.
  let armed = null;
  deleteBtn.addEventListener('click', () => {
    if (!armed) {
      deleteBtn.textContent = 'Click again to delete';
      armed = setTimeout(() => { armed = null; deleteBtn.textContent = 'Delete'; }, 5000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    act('Delete', 'DELETE', base, () => {
      stop.abort();
      window.location.hash = '#/jobs';
    });
  });

  call('GET', base).then((j) => {
    show(j);
    stream();
  }).catch((err) => message(status, err.status === 404 ? 'No such job.' : `Could not load the job: ${err.message}`, 'error'));

  return () => {
    stop.abort();
    clearTimeout(armed);
    clearTimeout(polling);
  };
}

// eventTime reads the time in an event id: the API's ids are Redis stream
// ids, "<milliseconds>-<sequence>". Anything else has no time.
function eventTime(id) {
  const ms = Number((id || '').split('-')[0]);
  return Number.isFinite(ms) && ms > 0 ? new Date(ms) : null;
}

function summary(e) {
  if (e.type === 'state' && e.data) return `${e.data.state}, attempt ${e.data.attempt}`;
  const text = typeof e.data === 'string' ? e.data : JSON.stringify(e.data);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
