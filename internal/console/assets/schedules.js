// Schedules: every schedule of the caller (read a page after another)
// with the job each fires (kind and input), their next run in the
// schedule's own zone, their last run and the job it fired, and the
// actions on each: edit, pause or resume, trigger (fire once now) and
// delete. A form creates a schedule, or edits one: an edit replaces its
// cron, zone, job and overlap and keeps its history (last run, last job).
import { allPages, call } from './api.js';
import { h, field, message, replace, select, table, time } from './dom.js';

export function render(root) {
  const status = h('p', { class: 'message', role: 'status', id: 'schedules-status' });
  const list = h('section', { 'aria-labelledby': 'schedules-title' });
  const form = scheduleForm(status, () => refresh());
  root.append(h('h1', { id: 'schedules-title' }, 'Schedules'), status, list, form.el);

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
      const schedules = await allPages('/v1/schedules', 'schedules');
      // Its cells wrap: the table fits a desktop's width without scrolling.
      replace(list, schedules.length === 0 ? h('p', {}, 'No schedule yet: create one below.') : h('div', { class: 'wraps' },
        table(null, ['Name', 'Cron', 'Job', 'Next run', 'Last run', 'State', 'Actions'], schedules.map((x) => {
          const path = `/v1/schedules/${encodeURIComponent(x.name)}`;
          const verb = x.paused ? 'resume' : 'pause';
          return [x.name, `${x.cron} (${x.timezone})`,
            h('span', { class: 'lines' }, h('span', {}, x.job.kind), x.job.input == null ? null : h('code', { class: 'wrap' }, JSON.stringify(x.job.input))),
            time(x.next_run_at, x.timezone),
            x.last_job_id ? h('span', { class: 'lines' }, time(x.last_run_at, x.timezone), h('span', {}, 'job ',
              h('a', { href: `#/jobs/${encodeURIComponent(x.last_job_id)}`, class: 'mono' }, x.last_job_id.slice(0, 8)))) : 'never',
            x.paused ? h('span', { class: 'badge paused' }, 'paused') : (x.overlap === 'skip' ? 'active, skips overlaps' : 'active'),
            h('span', { class: 'actions' },
              h('button', { type: 'button', 'aria-label': `Edit schedule ${x.name}`, onclick: () => form.edit(x) }, 'Edit'),
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
        }), (i) => ({ 'data-name': schedules[i].name }))));
    } catch (err) {
      message(status, `Could not load: ${err.message}`, 'error');
    }
  }
  refresh();
  const timer = setInterval(refresh, 5000);
  return () => clearInterval(timer);
}

// scheduleForm creates a schedule (POST) or, after edit(schedule), saves
// that one (PUT). The job's other fields (queue, priority, keys...) are
// kept as they were: the form sets its kind and input only.
function scheduleForm(status, saved) {
  let editing = null;
  const title = h('h2', { id: 'schedule-form-title' }, 'New schedule');
  const name = h('input', { name: 'name', required: true, autocomplete: 'off', pattern: '[a-z0-9][a-z0-9_.\\-]{0,63}', placeholder: 'nightly-digest' });
  const cron = h('input', { name: 'cron', required: true, autocomplete: 'off', placeholder: '0 3 * * *' });
  const zone = h('input', { name: 'timezone', autocomplete: 'off', placeholder: 'UTC' });
  const kind = h('input', { name: 'kind', required: true, autocomplete: 'off', placeholder: 'echo' });
  const input = h('textarea', { name: 'input', rows: 3, placeholder: '{"report": "daily"}' });
  const overlap = select('overlap', [['allow', 'allow: fire every time'], ['skip', 'skip while the last job runs']], 'allow');
  const submit = h('button', { type: 'submit' }, 'Create schedule');
  const reset = h('button', { type: 'button', hidden: true, onclick: () => clear() }, 'New schedule instead');
  const el = h('form', { id: 'schedule-form', class: 'stack', 'aria-labelledby': 'schedule-form-title' }, title,
    h('div', { class: 'row' }, field('Name', name), field('Cron (5 fields, @hourly, @every 30s)', cron), field('Time zone (IANA)', zone)),
    h('div', { class: 'row' }, field('Job kind', kind), field('Overlap', overlap)),
    field('Job input (JSON, optional)', input),
    h('div', { class: 'row' }, submit, reset));

  function clear() {
    editing = null;
    el.reset();
    name.readOnly = false;
    title.textContent = 'New schedule';
    submit.textContent = 'Create schedule';
    reset.hidden = true;
  }

  el.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const job = { ...(editing ? editing.job : {}), kind: kind.value.trim() };
    delete job.input;
    if (input.value.trim()) {
      try {
        job.input = JSON.parse(input.value);
      } catch {
        message(status, 'Not saved: the job input is not JSON.', 'error');
        return;
      }
    }
    const body = { name: name.value.trim(), cron: cron.value.trim(), timezone: zone.value.trim() || 'UTC', job, overlap: overlap.value };
    try {
      if (editing) await call('PUT', `/v1/schedules/${encodeURIComponent(body.name)}`, body);
      else await call('POST', '/v1/schedules', body);
      message(status, `Schedule ${body.name} ${editing ? 'saved' : 'created'}.`);
      clear();
      saved();
    } catch (err) {
      message(status, `Not saved: ${err.message}`, 'error');
    }
  });

  function edit(x) {
    editing = x;
    name.value = x.name;
    name.readOnly = true;
    cron.value = x.cron;
    zone.value = x.timezone;
    kind.value = x.job.kind;
    input.value = x.job.input == null ? '' : JSON.stringify(x.job.input, null, 2);
    overlap.value = x.overlap;
    title.textContent = `Edit schedule ${x.name}`;
    submit.textContent = 'Save changes';
    reset.hidden = false;
    el.scrollIntoView({ block: 'nearest' });
    cron.focus();
  }

  return { el, edit };
}
